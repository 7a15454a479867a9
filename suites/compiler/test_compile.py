"""``trtcheck.compile``: stitched modules match eager, failures fall back and are reported, shapes are checked."""

from __future__ import annotations

import time

import pytest
import torch
import torch.fx

import trtcheck
import trtcheck.conversion as converters
import trtcheck_zoo as models
from trtcheck import ReasonKind, Target
from trtcheck.partitioning.nodes import is_compute

aten = torch.ops.aten


def build(name):
    return models.get(name).build()


def test_seed_example_compiles_to_trt_torch_trt_and_matches_eager():
    model, inputs = build("seed_lgamma")
    stitched = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert [s.target for s in stitched.partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    engines = stitched.engines
    assert sorted(engines) == [0, 2] and all(e.backend == "onnxruntime" for e in engines.values())
    torch.testing.assert_close(stitched(*inputs), model(*inputs))
    fresh = tuple(torch.rand_like(x) + 0.5 for x in inputs)
    torch.testing.assert_close(stitched(*fresh), model(*fresh))
    assert "lgamma" in stitched.graph_module.code and "trt_engine_0" in str(stitched)


@pytest.mark.parametrize("name", models.names(tags=["fallback"]))
def test_fallback_models_keep_their_calling_convention_and_outputs(name):
    model, inputs = build(name)
    stitched = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1))
    # Some of the model really runs in an engine: otherwise this compares eager with eager.
    assert stitched.engines, stitched.partition.explain()
    expected, got = model(*inputs), stitched(*inputs)
    assert type(got) is type(expected)
    torch.testing.assert_close(got, expected)
    assert not stitched.partition.fallbacks
    stitched.graph_module.graph.lint()  # every value defined before use, targets exist


def test_a_segment_whose_conversion_fails_falls_back_and_is_reported():
    model, inputs = build("seed_lgamma")

    def broken(ctx, node):
        raise RuntimeError("deliberately broken converter")

    with converters.Snapshot():
        converters.register(aten.cat.default, override=True)(broken)
        stitched = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1))
        with pytest.raises(trtcheck.CompilationError, match="segment @2 .*deliberately broken converter"):
            trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), strict=True)
    partition = stitched.partition
    assert [s.target for s in partition.segments] == [Target.TENSORRT, Target.TORCH]  # @1 and @2 merged
    assert len(partition.fallbacks) == 1 and "deliberately broken converter" in partition.fallbacks[0]
    cat = next(n for n in partition.compute_nodes if n.target is aten.cat.default)
    assert partition.reasons[cat].kind is ReasonKind.CONVERSION_FAILED
    torch.testing.assert_close(stitched(*inputs), model(*inputs))
    assert trtcheck.check_invariants(partition).__len__() == 0


def test_a_wrong_converter_changes_the_answer():
    """The engine really runs the converted ONNX: a wrong converter is visible in the outputs."""
    from trtcheck.conversion.ops import elementwise  # noqa: F401 - the built-in mul converter lives there

    model, inputs = build("seed_lgamma")

    def mul_as_add(ctx, node):
        return ctx.add("Add", [ctx.name(node.args[0]), ctx.name(node.args[1], dtype=ctx.meta(node).dtype)])

    with converters.Snapshot():
        converters.register(aten.mul.Tensor, override=True)(mul_as_add)
        stitched = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1))
    mul = next(n for n in stitched.partition.compute_nodes if n.target is aten.mul.Tensor)
    assert stitched.partition.target_of(mul) is Target.TENSORRT and not stitched.partition.fallbacks
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):
        torch.testing.assert_close(stitched(*inputs), model(*inputs))


def test_compile_leaves_a_users_graph_module_alone():
    gm = torch.fx.symbolic_trace(lambda x: aten.relu.default(aten.sym_size.int(x, 0) * x))
    before = gm.code
    stitched = trtcheck.compile(gm, (torch.randn(3, 2),), trtcheck.Settings(min_block_size=1), support=lambda n: True)
    assert gm.code == before
    assert [s.target for s in stitched.partition.segments] == [Target.TENSORRT]  # not eager against eager
    x = torch.randn(3, 2)
    torch.testing.assert_close(stitched(x), gm(x))


def test_calling_with_a_wrong_shape_is_a_clear_error():
    model, inputs = build("seed_lgamma")
    stitched = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1))
    wrong = tuple(torch.rand(x.shape[0] + 2, *x.shape[1:]) for x in inputs)
    expected = r"input 'x': expected Tensor\[3, 4\] float32 .*got Tensor\[5, 4\].*compile again"
    with pytest.raises(trtcheck.InputMismatchError, match=expected):
        stitched(*wrong)


def test_shape_analysis_catches_metadata_that_lies():
    from trtcheck.errors import ShapeMismatchError
    from trtcheck.shapes import confirm_shapes

    model, inputs = build("seed_lgamma")
    partition = trtcheck.partition(model, inputs, trtcheck.Settings(min_block_size=1))
    confirm_shapes(partition, list(inputs))
    add = next(n for n in partition.compute_nodes if n.target is aten.add.Tensor)
    add.meta["val"] = torch.empty(7, 7)
    with pytest.raises(ShapeMismatchError, match=r"segment @0: add is \[3, 4\] torch.float32, metadata says \[7, 7\]"):
        confirm_shapes(partition, list(inputs))


def test_compile_times_cover_every_phase():
    model, inputs = build("seed_lgamma")
    start = time.perf_counter()
    times = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1)).compile_times
    elapsed = time.perf_counter() - start
    phases = ("lowering", "partitioning", "shape_analysis", "conversion", "engine_build", "stitching")
    assert all(getattr(times, phase) > 0 for phase in phases), times  # each phase is really timed
    # Spelled out, not ``sum(vars(times))`` (which is how ``total`` is defined): the phases add up, and
    # no phase is counted twice (nested timing would make the sum exceed the wall-clock time).
    assert times.total == pytest.approx(sum(getattr(times, phase) for phase in phases))
    assert times.total <= elapsed


def test_unknown_backend_is_a_clear_error():
    model, inputs = build("seed_lgamma")
    with pytest.raises(ValueError, match="unknown engine backend 'onnxrt'.*valid backends"):
        trtcheck.compile(model, inputs, backend="onnxrt")


ZOO_DONE = ["resnet18", "mobilenet_v3_small", "vit_b_16", "swin_t"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_DONE)
def test_zoo_models_compile_with_default_settings_and_match_eager(name):
    model, inputs = build(name)
    stitched = trtcheck.compile(model, inputs)
    partition = stitched.partition
    in_engines = sum(len(s.nodes) for s in partition.segments_of(Target.TENSORRT))
    total = sum(1 for n in partition.graph_module.graph.nodes if is_compute(n))
    assert in_engines / total > 0.9, partition.explain()
    assert not partition.fallbacks
    expected, got = model(*inputs), stitched(*inputs)
    torch.testing.assert_close(got, expected)  # torch's fp32 tolerances (rtol 1.3e-6, atol 1e-5)
    cosine = torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0)
    assert cosine > 0.99999
