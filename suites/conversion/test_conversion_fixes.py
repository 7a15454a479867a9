"""Regression tests for converter bugs users found, and for the contracts that keep them from returning.

Each bug test compiles the user's repro with ``trtcheck.compile`` (``min_block_size=1``, ONNX Runtime)
or converts the op through the converter harness, and compares with eager PyTorch.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

import trtcheck
from suites.conversion.converter_cases import CASES
from suites.conversion.converter_harness import Fn, check, export_graph
from trtcheck import ReasonKind, Target, dtypes
from trtcheck import conversion as converters
from trtcheck.conversion import ConversionError, onnx_dtype, segment_to_onnx
from trtcheck.conversion.arguments import bind
from trtcheck.conversion.ops._common import TENSORRT_DTYPES, engine_refusal
from trtcheck.engines.base import onnx_elem_type
from trtcheck.errors import EngineBuildError, LoweringError
from trtcheck.partitioning.partition import Fallback
from trtcheck.provenance import node_source

A = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)


def _compile_and_compare(model: torch.nn.Module, *inputs: torch.Tensor) -> trtcheck.CompiledModule:
    compiled = trtcheck.compile(model.eval(), inputs, ONE)
    with torch.no_grad():
        want, got = model(*inputs), compiled(*inputs)
    want, got = torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True)
    return compiled


def _claimed(compiled: trtcheck.CompiledModule, target) -> bool:
    partition = compiled.partition
    nodes = [n for n in partition.compute_nodes if n.target == target]
    assert nodes, f"{target} is not in the graph"
    return all(partition.target_of(n) is Target.TENSORRT for n in nodes)


# ---- schema-bound arguments ----------------------------------------------------------------------------------


def test_bind_fills_defaults_and_reads_keywords_and_positionals_alike() -> None:
    gm = export_graph(lambda x: A.add.Tensor(x, x, alpha=2) + A.sub.Scalar(x, 1.0, 3), (torch.randn(3),))
    add = next(n for n in gm.graph.nodes if n.target == A.add.Tensor and "alpha" in n.kwargs)
    sub = next(n for n in gm.graph.nodes if n.target == A.sub.Scalar)
    assert bind(add).alpha == 2
    assert bind(sub).alpha == 3  # positional: a node.kwargs.get("alpha", 1) read would have missed it
    plain = next(n for n in gm.graph.nodes if n.target == A.add.Tensor and "alpha" not in n.kwargs)
    assert bind(plain).alpha == 1  # the schema's default
    with pytest.raises(AttributeError, match=r"aten.sub.Scalar has no argument 'beta' \(its schema has: self, other, alpha\)"):
        _ = bind(sub).beta


def test_bind_rejects_calls_that_do_not_fit_the_schema() -> None:
    gm = export_graph(lambda x: A.relu.default(x), (torch.randn(3),))
    relu = next(n for n in gm.graph.nodes if n.target == A.relu.default)
    relu.kwargs = {"inplace": True}
    with pytest.raises(TypeError, match=r"aten.relu.default has no argument 'inplace'"):
        bind(relu)


def test_alpha_passed_positionally_is_not_ignored() -> None:
    """aten.sub.Scalar(x, 1.0, 3): alpha=3 arrives positionally and must scale the scalar."""
    check(lambda x: A.sub.Scalar(x, 1.0, 3), (torch.randn(4),), targets=(A.sub.Scalar,))


# ---- conv_transpose with output_padding >= stride ------------------------------------------------------------


def test_conv_transpose_output_padding_beyond_stride_is_refused_with_its_reason() -> None:
    layer = torch.nn.ConvTranspose2d(2, 2, 3, stride=(3, 2), dilation=4, output_padding=(2, 3))
    compiled = _compile_and_compare(layer, torch.randn(1, 2, 5, 5))
    node = next(n for n in compiled.partition.compute_nodes if n.target == A.convolution.default)
    assert compiled.partition.target_of(node) is Target.TORCH
    reason = compiled.partition.reasons[node]
    assert reason.kind is ReasonKind.NO_CONVERTER
    assert "output_padding (2, 3) not below stride (3, 2)" in reason.detail
    assert "ONNX ConvTranspose cannot express it" in compiled.partition.explain()
    assert not compiled.partition.fallbacks


def test_conv_transpose_output_padding_beyond_stride_within_padding_converts() -> None:
    """The extra rows are rows of the full transposed convolution: they become a smaller end padding."""
    layer = torch.nn.ConvTranspose2d(2, 3, 3, stride=(2, 1), padding=(2, 3), dilation=3, output_padding=(2, 1))
    compiled = _compile_and_compare(layer, torch.randn(1, 2, 5, 6))
    assert _claimed(compiled, A.convolution.default) and not compiled.partition.fallbacks


# ---- flash attention's logsumexp --------------------------------------------------------------------------------


def test_flash_attention_logsumexp_has_its_own_shape_and_values() -> None:
    attention = A._scaled_dot_product_flash_attention_for_cpu.default
    q, k, v = (torch.randn(4, 4, 3, 6, generator=torch.Generator().manual_seed(i)) for i in range(3))
    compiled = _compile_and_compare(Fn(lambda q, k, v: attention(q, k, v, is_causal=True)), q, k, v)
    assert compiled(q, k, v)[1].shape == (4, 4, 3)


# ---- 0-d permute and index_select -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn", [lambda x, i: A.permute.default(x, []) + 1, lambda x, i: A.index_select.default(x, 0, i) + 1],
    ids=["permute", "index_select"],
)
def test_zero_dim_input_converts(fn) -> None:
    compiled = _compile_and_compare(Fn(fn), torch.tensor(2.5), torch.tensor([0]))
    assert not compiled.partition.fallbacks
    assert all(compiled.partition.target_of(n) is Target.TENSORRT for n in compiled.partition.compute_nodes)


# ---- sparse tensors ---------------------------------------------------------------------------------------------


def test_sparse_example_input_is_a_clear_lowering_error() -> None:
    a = torch.randn(3, 3)
    with pytest.raises(LoweringError, match=r"torch.sparse_csr tensor .* dense \(strided\) tensors only.*to_dense"):
        trtcheck.compile(Fn(lambda s, b, c: torch.sparse.sampled_addmm(s, b, c)), (a.to_sparse_csr(), a, a), ONE)


def test_sparse_values_inside_a_model_stay_in_pytorch() -> None:
    a = torch.randn(3, 3)
    model = Fn(lambda x, b: torch.sparse.mm(x.to_sparse_csr(), b, reduce="sum") + 1)
    compiled = trtcheck.compile(model, (a, a), ONE)
    torch.testing.assert_close(compiled(a, a), model(a, a))


def test_engine_refusal_names_a_sparse_input() -> None:
    gm = export_graph(lambda x: A.relu.default(x), (torch.randn(3, 3),))
    relu = next(n for n in gm.graph.nodes if n.target == A.relu.default)
    producer = relu.args[0]
    producer.meta["val"] = producer.meta["val"].to_sparse()
    assert f"input self (%{producer.name}) is a torch.sparse_coo tensor" in engine_refusal(relu)
    assert not converters.is_convertible(relu)


# ---- precise log1p / expm1 --------------------------------------------------------------------------------------


def test_log_of_softplus_keeps_small_values() -> None:
    """log(softplus(-20)) is -20 eagerly; Log(1 + exp(-20)) rounds to log(1) = 0 and then -inf."""
    model = Fn(lambda x: torch.log(F.softplus(x)))
    compiled = _compile_and_compare(model, torch.tensor([-20.0, -5.0, 0.0, 3.0]))
    assert _claimed(compiled, A.log.default)


@pytest.mark.parametrize("op", [A.log1p.default, A.expm1.default], ids=["log1p", "expm1"])
def test_log1p_expm1_are_precise_over_their_range(op) -> None:
    x = torch.tensor([0.0, -0.0, 1e-30, -1e-20, 1e-10, 3e-8, -1e-7, 1e-5, 0.3, -0.5, 1.0, 20.0, 80.0, 1e30,
                      -1.0, -50.0, math.inf, -math.inf, math.nan])
    if op == A.expm1.default:
        x = x[x != 1e30]  # overflows to inf either way; kept out to keep the ratio exact
    result = check(lambda t: op(t), (x,), targets=(op,))
    got = torch.from_numpy(np.asarray(result.actual[0]))
    torch.testing.assert_close(got, op(x), rtol=2e-7, atol=0, equal_nan=True)


# ---- floor division and remainder as PyTorch computes them -----------------------------------------------------


def test_floor_division_and_remainder_follow_aten() -> None:
    t = torch.tensor([0.3, 0.7, 2.3, -0.7, -2.3, 5.0, -0.0, 1e-8])
    check(lambda x: A.div.Tensor_mode(x, 0.1, rounding_mode="floor"), (t,))
    check(lambda x: A.remainder.Scalar(x, 0.1), (t,))
    check(lambda x: A.remainder.Scalar(x, -0.1), (t,))
    divisors = torch.tensor([0.1, -0.1, 0.0, 3.0, -3.0, 0.25, 7.0, -0.0])
    check(lambda x, y: A.div.Tensor_mode(x, y, rounding_mode="floor"), (t, divisors))
    check(lambda x, y: A.remainder.Tensor(x, y), (t, divisors))
    check(lambda x, y: A.floor_divide.default(x, y), (t, divisors))


# ---- NaN propagates through max/min and their indices -------------------------------------------------------------


_NAN = torch.tensor([[0.5, math.nan, 2.0, math.nan], [1.0, -1.0, 3.0, 0.0], [math.nan, 4.0, -2.0, 1.0]])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: A.amax.default(x, [1]),
        lambda x: A.amin.default(x, [0, 1], True),
        lambda x: A.max.dim(x, 1),
        lambda x: A.min.dim(x, 0, True),
        lambda x: A.argmax.default(x, 1),
        lambda x: A.argmin.default(x, 0),
        lambda x: A.argmax.default(x),
        lambda x: A.max.default(x),
        lambda x: A.min.default(x[1]),
    ],
    ids=["amax", "amin", "max.dim", "min.dim", "argmax", "argmin", "argmax-flat", "max", "min-no-nan"],
)
def test_nan_propagates_like_pytorch(fn) -> None:
    check(fn, (_NAN,))


# ---- validators claim only what the emitted ONNX takes -----------------------------------------------------------


def _reduced_precision_variants():
    """Every float32 converter case again in float16 and bfloat16: ``(id, case, dtype)``."""
    for case in CASES:
        inputs = case.inputs()
        if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in inputs):
            continue
        for dtype in (torch.float16, torch.bfloat16):
            yield f"{case.id}-{str(dtype).removeprefix('torch.')}", case, dtype


#: How many variants must reach ``segment_to_onnx`` (every node claimed in the dtype): 583 of 642 when this
#: was written. Skipping a variant is allowed (eager cannot run it, a validator refuses the dtype), but a
#: validator that stops claiming float16 or bfloat16, or a harness that skips everything, must fail here.
CHECKED_VARIANTS_FLOOR = 583


@pytest.mark.slow
def test_claimed_dtypes_are_accepted_by_the_emitted_onnx_ops() -> None:
    """What a validator claims, the ONNX it emits must take: segment_to_onnx runs onnx.checker with full
    type inference, which fails on an op given a type outside its schema's constraints (bfloat16 Conv
    or MaxPool in opset 19). Unclaimed nodes and cases eager PyTorch cannot run in ``dtype`` are skipped,
    and counted: at least ``CHECKED_VARIANTS_FLOOR`` variants must be checked."""
    checked: list[str] = []
    skipped: dict[str, str] = {}
    failures: list[str] = []
    for variant, case, dtype in _reduced_precision_variants():
        inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t for t in case.inputs())
        try:
            gm = export_graph(case.fn, inputs, case.decompose)
        except Exception as error:  # noqa: BLE001 - e.g. a module whose float32 weights refuse half inputs
            skipped[variant] = f"eager/export cannot run it: {type(error).__name__}"
            continue
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        if not all(converters.is_convertible(n) for n in calls):
            skipped[variant] = "not every node is claimed in this dtype"
            continue
        checked.append(variant)
        try:
            segment_to_onnx(gm)  # raises ConversionError("... invalid ...") on a type the ONNX schema refuses
        except Exception as error:  # noqa: BLE001 - every variant is checked, then all failures reported
            failures.append(f"{variant}: {type(error).__name__}: {error}")
    assert not failures, f"{len(failures)} of {len(checked)} checked variants fail:\n" + "\n".join(failures)
    assert len(checked) >= CHECKED_VARIANTS_FLOOR, (
        f"only {len(checked)} of {len(checked) + len(skipped)} variants were checked, {CHECKED_VARIANTS_FLOOR} expected; "
        "skipped:\n" + "\n".join(f"{variant}: {why}" for variant, why in skipped.items())
    )


def test_bfloat16_max_pool_converts_and_matches() -> None:
    x = torch.randn(1, 2, 6, 6).to(torch.bfloat16)
    gm = export_graph(lambda t: A.max_pool2d.default(t, [2, 2]), (x,))
    model = segment_to_onnx(gm)
    assert {n.op_type for n in model.graph.node} >= {"Cast", "MaxPool"}


def test_bfloat16_average_pooling_stays_in_pytorch() -> None:
    gm = export_graph(lambda t: A.avg_pool2d.default(t, [2, 2]), (torch.randn(1, 2, 6, 6).to(torch.bfloat16),))
    node = next(n for n in gm.graph.nodes if n.target == A.avg_pool2d.default)
    assert not converters.is_convertible(node)


# ---- one dtype table ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", dtypes.ROWS, ids=lambda r: str(r.torch).removeprefix("torch."))
def test_converters_writer_and_engines_agree_on_every_dtype(row) -> None:
    """The old disagreement (validators, ONNX writer and engines each had their own int8/int16/float64 rule)
    cannot return: all three follow the table's ``in_engine``."""
    gm = export_graph(lambda x: A.clone.default(x), (torch.zeros(3, dtype=row.torch),))
    node = next(n for n in gm.graph.nodes if n.target == A.clone.default)
    assert converters.is_convertible(node) is row.in_engine
    assert (row.torch in TENSORRT_DTYPES) is row.in_engine
    if row.in_engine:
        assert onnx_dtype(row.torch) == onnx_elem_type(row.torch) == row.onnx
    else:
        assert f"{str(row.torch).removeprefix('torch.')}, which a TensorRT segment cannot hold" in engine_refusal(node)
        with pytest.raises(ConversionError, match="cannot be held by a TensorRT segment"):
            onnx_dtype(row.torch)
        with pytest.raises(EngineBuildError, match="cannot cross an engine boundary"):
            onnx_elem_type(row.torch)


def test_no_validator_declares_a_dtype_outside_the_table() -> None:
    """Every built-in converter's declared input/output dtypes lie inside the table's ENGINE_DTYPES."""
    checked = 0
    for target in converters.registered_targets():
        validator = converters.get(target).validator
        for name in ("input_dtypes", "output_dtypes"):
            declared = getattr(validator, name, None)
            if declared is not None:
                checked += 1
                assert declared <= dtypes.ENGINE_DTYPES, (target, name, declared - dtypes.ENGINE_DTYPES)
    assert checked >= 2 * 150  # every built-in converter declares both


# ---- Linear next to a graph output --------------------------------------------------------------------------------


class AddThenLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, r: torch.Tensor):
        a = x + r
        return a, self.lin(a)


def test_linear_whose_input_is_a_graph_output_compiles() -> None:
    """Transpose(W) -> Gemm next to ``a`` being a graph output broke ONNX Runtime's optimizer."""
    compiled = _compile_and_compare(AddThenLinear(), torch.randn(2, 4), torch.randn(2, 4))
    assert not compiled.partition.fallbacks
    model = onnx.load_from_string(next(iter(compiled.conversion.onnx_models.values())))
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert onnx.helper.get_attribute_value(next(a for a in gemm.attribute if a.name == "transB")) == 1
    assert "Transpose" not in {n.op_type for n in model.graph.node}  # the unused one was pruned


class LinearOnTransposed(torch.nn.Module):
    """nn.Linear on a non-contiguous 3-D input: lowers to ``bmm(x, view(expand(permute(W))))`` (BERT's
    attention output), not to ``mm``."""

    def __init__(self, features: int = 6, out: int = 5) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(features, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.transpose(0, 1))


def _matmul_operand_producers(compiled: trtcheck.CompiledModule) -> list[str]:
    """The op type producing each MatMul's second operand."""
    (model,) = (onnx.load_from_string(m) for m in compiled.conversion.onnx_models.values())
    producer = {out: n.op_type for n in model.graph.node for out in n.output}
    return [producer.get(n.input[1], "initializer") for n in model.graph.node if n.op_type == "MatMul"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_batch"])
def test_linear_on_a_non_contiguous_input_multiplies_the_matrix_itself(dynamic: bool) -> None:
    """The engine gets MatMul(x, W^T) broadcast over the batch, not an Expand of the weight, which ONNX
    Runtime folds into a batch-sized copy of every such weight (issue 25)."""
    model, x = LinearOnTransposed().eval(), torch.randn(3, 4, 6)
    lowered_targets = {n.target for n in trtcheck.lower(model, (x,)).graph.nodes}
    assert {torch.ops.aten.bmm.default, torch.ops.aten.expand.default} <= lowered_targets  # the case is the one meant
    if dynamic:
        batch = torch.export.Dim("batch", min=2, max=16)
        compiled = trtcheck.compile(model, (x,), ONE, dynamic_shapes=({1: batch},))
        for size in (2, 7):
            other = torch.randn(3, size, 6)
            with torch.no_grad():
                torch.testing.assert_close(compiled(other), model(other))
    else:
        compiled = _compile_and_compare(model, x)
    assert not compiled.partition.fallbacks
    assert _matmul_operand_producers(compiled) == ["Transpose"]  # W^T itself: no Expand (or Reshape) of it


def test_bmm_of_a_truly_batched_operand_keeps_its_expand() -> None:
    """Only an expand that adds the batch dim to a whole matrix is skipped: one that also broadcasts
    within the matrix (here (1, N) -> (K, N)) must stay."""

    class RowMatrix(torch.nn.Module):
        def forward(self, a: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
            return torch.bmm(a, row.expand(3, 4, 5))

    compiled = _compile_and_compare(RowMatrix(), torch.randn(3, 2, 4), torch.randn(1, 5))
    assert _matmul_operand_producers(compiled) in (["Expand"], ["Reshape"])


def test_fallback_reason_tells_an_engine_failure_from_a_converter_bug(monkeypatch) -> None:
    from trtcheck.engines import onnxruntime as ort_engine

    def refuse(*args, **kwargs):
        raise EngineBuildError("onnxruntime: could not create a session for the segment's ONNX model: boom")

    monkeypatch.setattr(ort_engine.OnnxRuntimeEngine, "build", classmethod(lambda cls, *a, **k: refuse()))
    compiled = trtcheck.compile(AddThenLinear().eval(), (torch.randn(2, 4), torch.randn(2, 4)), ONE,
                                backend="onnxruntime")
    (fallback,) = compiled.partition.fallbacks
    assert "[engine build failed" in fallback and "rather than a converter bug" in fallback

    def broken(ctx, node):
        raise RuntimeError("deliberately broken")

    with converters.Snapshot():
        converters.register(A.add.Tensor, override=True)(broken)
        monkeypatch.undo()
        compiled = trtcheck.compile(AddThenLinear().eval(), (torch.randn(2, 4), torch.randn(2, 4)), ONE)
    (fallback,) = compiled.partition.fallbacks
    assert "conversion failed: a trtcheck converter bug" in fallback


# ---- Partition.with_fallbacks -------------------------------------------------------------------------------------


def test_partition_with_fallbacks_retargets_records_and_merges_in_a_new_partition() -> None:
    model = Fn(lambda x: torch.lgamma(torch.relu(x) + 1).sin() * 2)
    partition = trtcheck.partition(model, (torch.rand(3) + 0.5,), ONE)
    kinds = [s.target for s in partition.segments]
    assert kinds == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    before = ([(s.target, list(s.nodes)) for s in partition.segments], dict(partition.reasons), list(partition.fallbacks))
    size = len(partition.segments[0].nodes)
    after = partition.with_fallbacks({0: Fallback(RuntimeError("nope"), "engine build failed")})
    message = "RuntimeError: nope [engine build failed]"
    assert [s.target for s in after.segments] == [Target.TORCH, Target.TENSORRT]  # merged with its neighbour
    source = node_source(partition.segments[0].nodes[0])  # where in the user's code the segment came from
    assert source and after.fallbacks == [f"segment @0 ({size} nodes) runs in PyTorch: {message} [from {source}]"]
    node = next(n for n in after.compute_nodes if n.target == A.relu.default)
    assert after.reasons[node].kind is ReasonKind.CONVERSION_FAILED and after.reasons[node].detail == message
    assert partition.surviving_indices(after) == {2: 1}  # what engines built per segment are re-keyed by
    # The partition partitioning made is left as it was: segments, their nodes, reasons and fallbacks.
    assert ([(s.target, list(s.nodes)) for s in partition.segments], dict(partition.reasons), list(partition.fallbacks)) == before
    with pytest.raises(ValueError, match="already runs in Torch"):
        after.with_fallbacks({0: Fallback(RuntimeError("again"))})
    with pytest.raises(ValueError, match="has 3 segments"):
        partition.with_fallbacks({7: Fallback(RuntimeError("stranger"))})
