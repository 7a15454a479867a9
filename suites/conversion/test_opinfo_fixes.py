"""Regression tests for the failures ``test_opinfo.py`` found: bool Where, one-value conv lists, unbatched
adaptive pooling, NaN through Max/Min/Clip, and a segment whose values disagree with the graph's metadata
falling back instead of raising out of ``trtcheck.compile``.

Each compiles with ``trtcheck.compile`` (``min_block_size=1``, ONNX Runtime) or converts through the
converter harness, and compares with eager PyTorch.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import trtcheck
from suites.conversion.converter_harness import Fn, check, export_graph
from trtcheck import Target
from trtcheck import conversion as converters
from trtcheck.conversion import segment_to_onnx
from trtcheck.errors import CompilationError, ShapeMismatchError
from trtcheck.shapes import confirm_shapes, find_mismatches

A = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)
NAN = float("nan")


def _compile(fn, *inputs: torch.Tensor, **kwargs) -> trtcheck.CompiledModule:
    return trtcheck.compile(Fn(fn).eval(), inputs, ONE, backend="onnxruntime", **kwargs)


def _equal_to_eager(compiled: trtcheck.CompiledModule, fn, *inputs: torch.Tensor) -> None:
    with torch.no_grad():
        want, got = fn(*inputs), compiled(*inputs)
    for w, g in zip(torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)):
        torch.testing.assert_close(g, w, equal_nan=True)


def _all_in_tensorrt(compiled: trtcheck.CompiledModule, target) -> None:
    partition = compiled.partition
    assert not partition.fallbacks, partition.fallbacks
    nodes = [n for n in partition.compute_nodes if n.target == target]
    assert nodes and all(partition.target_of(n) is Target.TENSORRT for n in nodes), partition.explain()


# ---- 1. where on bool data ------------------------------------------------------------------------------


def _bools(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5


@pytest.mark.parametrize(
    "fn",
    [lambda c, a, b: torch.where(c, a, b), lambda c, a, b: a.masked_fill(c, True) ^ b],
    ids=["where", "masked_fill"],
)
def test_where_on_bool_data_builds_and_runs_in_the_engine(fn) -> None:
    inputs = (_bools(3, 4, seed=0), _bools(3, 4, seed=1), _bools(1, 4, seed=2))
    compiled = _compile(fn, *inputs)
    _all_in_tensorrt(compiled, A.where.self)  # before: the session failed (no bool Where kernel), fell back
    _equal_to_eager(compiled, fn, *inputs)


def test_where_never_selects_bool_tensors() -> None:
    """The emitted Where selects int32s for bool data, as ONNX Runtime's CPU provider requires."""
    result = check(lambda c, a, b: torch.where(c, a, b), (_bools(2, 3, seed=0), _bools(2, 3, seed=1), _bools(2, 3, seed=2)),
                   targets=[A.where.self])
    model = onnx.shape_inference.infer_shapes(result.model)
    types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.input)}
    wheres = [n for n in model.graph.node if n.op_type == "Where"]
    assert wheres and all(types[n.input[1]] == TensorProto.INT32 for n in wheres)


# ---- 3. conv with one value for every spatial dim -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_conv2d_padding_valid_converts(dtype) -> None:
    x, w = torch.randn(1, 2, 6, 5).to(dtype), torch.randn(3, 2, 3, 2).to(dtype)
    compiled = _compile(lambda x, w: F.conv2d(x, w, padding="valid"), x, w)
    _all_in_tensorrt(compiled, A.convolution.default)
    _equal_to_eager(compiled, lambda x, w: F.conv2d(x, w, padding="valid"), x, w)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
def test_convolution_single_value_lists_broadcast_to_every_spatial_dim(transposed) -> None:
    """stride [2], padding [1], dilation [1], output_padding [1]: ATen repeats each for both dims."""
    x = torch.randn(1, 2, 7, 6)
    w = torch.randn(2, 3, 3, 3) if transposed else torch.randn(3, 2, 3, 3)
    output_padding = [1] if transposed else [0]
    check(lambda x, w: A.convolution.default(x, w, None, [2], [1], [1], transposed, output_padding, 1), (x, w),
          targets=[A.convolution.default])


# ---- 4. adaptive average pooling of unbatched inputs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: F.adaptive_avg_pool3d(x, (4, None, 2)), (3, 8, 8, 6)),
        (lambda x: F.adaptive_avg_pool3d(x, (1, 1, 1)), (3, 8, 8, 6)),
        (lambda x: F.adaptive_avg_pool3d(x, (4, None, 2)), (2, 3, 8, 8, 6)),
        (lambda x: F.adaptive_avg_pool2d(x, (None, 2)), (3, 8, 6)),
    ],
    ids=["3d-unbatched-none", "3d-unbatched-global", "3d-batched-none", "2d-unbatched-none"],
)
def test_adaptive_avg_pool_reads_its_spatial_dims_from_the_end(fn, shape) -> None:
    x = torch.randn(shape)
    compiled = _compile(fn, x)
    assert not compiled.partition.fallbacks, compiled.partition.fallbacks
    _equal_to_eager(compiled, fn, x)


def test_adaptive_avg_pool_to_sizes_that_do_not_divide_pools_ATen_s_windows() -> None:
    """(5, None, 2) of [3, 8, 8, 6]: 8 is no multiple of 5 (overlapping windows), and None keeps the height."""
    fn = lambda x: F.adaptive_avg_pool3d(x, (5, None, 2))  # noqa: E731
    x = torch.randn(3, 8, 8, 6)
    compiled = _compile(fn, x)
    node = next(n for n in compiled.partition.compute_nodes if n.target == A._adaptive_avg_pool3d.default)
    assert compiled.partition.target_of(node) is Target.TENSORRT, compiled.partition.explain()
    _equal_to_eager(compiled, fn, x)


# ---- 5. NaN through maximum / minimum / clamp -------------------------------------------------------------------

_X = torch.tensor([[NAN, 1.0, NAN, 2.0, -3.0, float("inf")]])
_Y = torch.tensor([[1.0, NAN, NAN, -1.0, 0.0, NAN]])


class _NanDroppingMax(OpRun):
    op_domain = ""

    def _run(self, *inputs):  # C's fmax / CUDA's fmaxf: the number wins over NaN
        return (np.fmax.reduce(np.broadcast_arrays(*inputs)) if len(inputs) > 1 else inputs[0],)


class Max(_NanDroppingMax):
    pass


class Min(OpRun):
    op_domain = ""

    def _run(self, *inputs):
        return (np.fmin.reduce(np.broadcast_arrays(*inputs)) if len(inputs) > 1 else inputs[0],)


_NAN_FNS = {
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "clamp-tensor": lambda x, y: torch.clamp(x, min=y, max=y + 1),
    "clamp-nan-min": lambda x, y: torch.clamp(x + y, min=NAN, max=1.0),
    "clamp-nan-max": lambda x, y: torch.clamp(x, max=NAN) * y,
    "clamp-scalar": lambda x, y: torch.clamp(x, -1.0, 1.5) + y,
    "hardtanh": lambda x, y: F.hardtanh(x * y, -0.5, 0.5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", list(_NAN_FNS))
def test_nan_goes_through_like_eager_on_onnx_runtime(name, dtype) -> None:
    check(_NAN_FNS[name], (_X.to(dtype), _Y.to(dtype)))


@pytest.mark.parametrize("name", list(_NAN_FNS))
def test_nan_goes_through_on_a_backend_whose_max_drops_nan(name) -> None:
    """ONNX leaves NaN in Max/Min unspecified: with the fmax/fmin a GPU backend may use, the emitted
    model must still give PyTorch's NaN (ONNX Runtime's own Max happens to propagate it)."""
    fn = _NAN_FNS[name]
    gm = export_graph(fn, (_X, _Y))
    model = segment_to_onnx(gm)
    names = [i.name for i in model.graph.input]
    (got,) = ReferenceEvaluator(model, new_ops=[Max, Min]).run(None, dict(zip(names, (_X.numpy(), _Y.numpy()))))
    torch.testing.assert_close(torch.from_numpy(np.asarray(got)), fn(_X, _Y), equal_nan=True)


# ---- 2. values that disagree with the graph's metadata fall back, never raise -----------------------------------


def _batch_norm_training(x, w, b, rm, rv):
    return torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.5, 0.6)


def _batch_norm_inputs(dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(5, 5, 5, generator=g).to(dtype), *(torch.rand(5, generator=g).to(dtype) + 0.5 for _ in range(4)))


@pytest.mark.slow
def test_float16_training_batch_norm_falls_back_naming_the_value_instead_of_raising() -> None:
    """PyTorch's meta says float32 running statistics for a float16 input, the CPU kernel gives float16:
    the TensorRT segment reading them falls back, and the reason says which value, and both dtypes."""
    inputs = _batch_norm_inputs()
    compiled = _compile(_batch_norm_training, *inputs)  # raised ShapeMismatchError before
    (fallback,) = compiled.partition.fallbacks
    assert "ShapeMismatchError: input getitem_3 is [5] torch.float16" in fallback
    assert "metadata says [5] torch.float32" in fallback and "[shape analysis" in fallback
    assert any(target == "tensorrt" for target, _ in compiled.conversion.layout)  # claimed, then sent back
    _equal_to_eager(compiled, _batch_norm_training, *_batch_norm_inputs())
    with pytest.raises(CompilationError, match="failed to compile: ShapeMismatchError: input getitem_3"):
        _compile(_batch_norm_training, *inputs, strict=True)
    with pytest.raises(trtcheck.VerificationError, match="fallback"):
        trtcheck.verify(Fn(_batch_norm_training), inputs, ONE, backend="onnxruntime")
    assert trtcheck.verify(Fn(_batch_norm_training), inputs, ONE, backend="onnxruntime", allow_fallbacks=True).passed


def test_find_mismatches_reports_every_value_and_confirm_shapes_still_raises() -> None:
    fn = Fn(lambda x: torch.lgamma(torch.relu(x) + 1).sin() * 2)
    inputs = (torch.rand(3, 4) + 0.5,)
    partition = trtcheck.partition(fn, inputs, ONE)
    assert find_mismatches(partition, list(inputs)) == []
    lgamma = next(n for n in partition.compute_nodes if n.target is A.lgamma.default)
    lgamma.meta["val"] = torch.empty(4, 3, dtype=torch.float16)
    (mismatch,) = find_mismatches(partition, list(inputs))
    assert mismatch.node is lgamma and mismatch.expected == "[4, 3] torch.float16" and mismatch.got == "[3, 4] torch.float32"
    with pytest.raises(ShapeMismatchError, match=r"lgamma is \[3, 4\] torch.float32, metadata says \[4, 3\] torch.float16"):
        confirm_shapes(partition, list(inputs))


def _swap_dims(ctx, node):
    """sin's result with its dims swapped through a Reshape whose shape is computed (Shape, Concat): the
    checker's own shape inference cannot see the result is [3, 2] where the metadata says [2, 3]."""
    x = ctx.add("Sin", [ctx.name(node.args[0])])
    shape = ctx.add("Concat", [ctx.add("Shape", [x], start=1), ctx.add("Shape", [x], end=1)], axis=0)
    return ctx.add("Reshape", [x, shape])


def _wrong_dtype(ctx, node):
    return ctx.add("Cast", [ctx.add("Sin", [ctx.name(node.args[0])])], to=TensorProto.FLOAT16)


@pytest.mark.parametrize(
    ("wrong", "got"), [(_swap_dims, "[3, 2] float32"), (_wrong_dtype, "[2, 3] float16")], ids=["shape", "dtype"]
)
def test_a_converter_whose_output_disagrees_with_the_metadata_falls_back(wrong, got) -> None:
    fn = lambda x: torch.sin(x)  # noqa: E731
    x = torch.randn(2, 3)
    with converters.Snapshot():
        converters.register(A.sin.default, override=True)(wrong)
        compiled = _compile(fn, x)  # the shape case raised only when the compiled module ran
        with pytest.raises(trtcheck.VerificationError, match="fallback"):
            trtcheck.verify(Fn(fn), (x,), ONE, backend="onnxruntime")
    (fallback,) = compiled.partition.fallbacks
    assert f"output 0 (%sin): the converted ONNX gives {got}, the graph's metadata says [2, 3] float32" in fallback
    assert "[conversion failed" in fallback
    _equal_to_eager(compiled, fn, x)
