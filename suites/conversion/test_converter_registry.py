"""The registry's contents and validators: coverage, deliberate gaps, dtype/shape/argument rejection."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest
import torch

import trtcheck.conversion as converters
from suites.conversion.converter_cases import CASES
from suites.conversion.converter_harness import convert, emitted_ops, export_graph
from trtcheck.conversion import registry
from trtcheck.conversion.ops import _common
from trtcheck.conversion.ops.trt_onnx_ops import TENSORRT_ONNX_OPS, TENSORRT_ONNX_TYPES, TENSORRT_VERSION
from trtcheck.lowering.graph import is_getitem

A = torch.ops.aten
ZOO_FILE = Path(__file__).with_name("zoo_overloads.txt")


def _zoo_overloads() -> list[object]:
    """Targets listed in zoo_overloads.txt (written by collect_zoo_overloads.py)."""
    targets = []
    for line in ZOO_FILE.read_text().splitlines():
        name = line.split("#")[0].strip()
        if name == "<built-in function getitem>":
            targets.append(operator.getitem)
        elif name:
            _, packet, overload = name.split(".")
            targets.append(getattr(getattr(A, packet), overload))
    return targets


def _node(gm: torch.fx.GraphModule, target: object) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.target == target)


#: How many converters trtcheck registers itself (``operator.getitem`` included). Exact, not a floor: a
#: converter module the ops package stops importing, or a table row lost in a refactor, must fail here.
#: Adding or removing a built-in converter changes this number on purpose.
BUILTIN_CONVERTERS = 220


def test_the_exact_number_of_builtin_converters_is_registered() -> None:
    builtin = [t for t in converters.registered_targets() if converters.get(t).builtin]
    assert len(builtin) == BUILTIN_CONVERTERS, (
        f"{len(builtin)} built-in converters registered, {BUILTIN_CONVERTERS} expected: a converter module or "
        "registration was lost, or one was added without updating BUILTIN_CONVERTERS"
    )


def test_every_zoo_overload_is_registered() -> None:
    zoo = _zoo_overloads()
    assert len(zoo) >= 40, "zoo_overloads.txt looks truncated"
    missing = [str(t) for t in zoo if t not in converters.registered_targets()]
    assert not missing


def test_every_registered_overload_has_a_case() -> None:
    """Each converter is exercised against PyTorch by test_converter_ops."""
    covered = {t for case in CASES for t in case.targets}
    untested = sorted(str(t) for t in converters.registered_targets() - covered)
    assert not untested


@pytest.mark.slow
def test_emitted_onnx_ops_are_supported_by_tensorrt() -> None:
    """Every ONNX op type the converters emit (over all cases) is in TensorRT's documented list."""
    emitted: set[str] = set()
    for case in CASES:
        emitted |= emitted_ops(convert(case.fn, case.inputs(), case.decompose).model)
    assert emitted - TENSORRT_ONNX_OPS == set(), f"not supported by TensorRT {TENSORRT_VERSION}"
    assert emitted - TENSORRT_ONNX_TYPES.keys() == set(), "record TensorRT's supported types for these"
    assert {"Conv", "MatMul", "Gemm", "LayerNormalization", "ScatterElements"} <= emitted


@pytest.mark.parametrize("target", [A.lgamma.default, A.digamma.default])
def test_ops_tensorrt_cannot_run_have_no_converter(target: object) -> None:
    assert converters.get(target) is None
    gm = export_graph(lambda x: target(x), (torch.rand(3) + 1,))
    assert not converters.is_convertible(_node(gm, target))


def test_float64_is_rejected_for_every_converter_kind() -> None:
    cases = [
        (lambda x: A.add.Tensor(x, x), A.add.Tensor),
        (lambda x: A.relu.default(x), A.relu.default),
        (lambda x: A.view.default(x, [-1]), A.view.default),
        (lambda x: A.sum.dim_IntList(x, [0]), A.sum.dim_IntList),
    ]
    for fn, target in cases:
        convertible = export_graph(fn, (torch.randn(2, 3),))
        rejected = export_graph(fn, (torch.randn(2, 3, dtype=torch.float64),))
        assert converters.is_convertible(_node(convertible, target))
        assert not converters.is_convertible(_node(rejected, target)), target


def test_float64_output_from_float32_input_is_rejected() -> None:
    gm = export_graph(lambda x: A._to_copy.default(x, dtype=torch.float64), (torch.randn(2),))
    assert not converters.is_convertible(_node(gm, A._to_copy.default))


def test_complex_is_rejected() -> None:
    gm = export_graph(lambda x: A.mul.Tensor(x, x), (torch.randn(3, dtype=torch.complex64),))
    assert not converters.is_convertible(_node(gm, A.mul.Tensor))


def test_dynamic_shapes_are_rejected() -> None:
    """By converters not declared ``dynamic`` (repeat's Tile reshapes by the input's static shape); the dynamic
    ones are tested across sizes in test_dynamic_converters.py."""
    batch = torch.export.Dim("batch")

    class Repeat(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return A.repeat.default(x, [2, 1, 1])

    ep = torch.export.export(Repeat(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: batch}})
    node = _node(ep.graph_module, A.repeat.default)
    assert not converters.is_convertible(node)


@pytest.mark.parametrize(
    ("fn", "args", "target"),
    [
        # TensorRT has no MaxPool indices output.
        (lambda x: A.max_pool2d_with_indices.default(x, [2, 2])[1].float(), (torch.randn(1, 1, 4, 4),),
         A.max_pool2d_with_indices.default),
        # LayerNormalization: only Y is supported.
        (lambda x: A.native_layer_norm.default(x, [4], None, None, 1e-5)[1], (torch.randn(2, 4),),
         A.native_layer_norm.default),
        (lambda x: A.max_pool2d.default(x, [2, 2], [1, 1], [0, 0], [2, 2]), (torch.randn(1, 1, 6, 6),),
         A.max_pool2d.default),
        # A bool mask: its count of True elements (the output's size) is known only at run time.
        (lambda x, m: A.index.Tensor(x, [m]), (torch.randn(3, 4), torch.tensor([True, False, True])),
         A.index.Tensor),
        (lambda x: A.mm.default(x, x), (torch.ones(3, 3, dtype=torch.int32),), A.mm.default),
        (lambda x: A.gelu.default(x), (torch.ones(3, dtype=torch.int32),), A.gelu.default),
        (lambda x: A._softmax.default(x, 0, True), (torch.randn(3, dtype=torch.float16),), A._softmax.default),
        (lambda x: A.add.Tensor(x, x), (torch.ones(3, dtype=torch.int8),), A.add.Tensor),
        (lambda x: A.add.Tensor(x, x), (torch.ones(3, dtype=torch.bool),), A.add.Tensor),
        (lambda x: A.reflection_pad1d.default(x, [-1, 1]), (torch.randn(1, 2, 4),), A.reflection_pad1d.default),  # constant pads crop
        (lambda x: A.dropout.default(x, 0.5, True), (torch.randn(2, 4),), A.dropout.default),
        (lambda x: A._to_copy.default(x, dtype=torch.float16, device="meta"), (torch.randn(2, 4),),
         A._to_copy.default),
        (lambda x: A.split_with_sizes.default(x, [0, 4], 1)[1], (torch.randn(2, 4),), A.split_with_sizes.default),
        # TensorRT type restrictions (TENSORRT_ONNX_TYPES): no bool Pad/ScatterElements.
        (lambda x: A.constant_pad_nd.default(x, [1, 1]), (torch.ones(3, dtype=torch.bool),), A.constant_pad_nd.default),
        (lambda x, s: A.slice_scatter.default(x, s, 0, 0, 1),
         (torch.ones(3, dtype=torch.bool), torch.ones(1, dtype=torch.bool)), A.slice_scatter.default),
    ],
    ids=["maxpool-indices", "layernorm-mean", "maxpool-dilation",
         "index-bool-mask", "mm-int", "gelu-int", "softmax-half-to-float", "int8",
         "bool-add", "negative-reflection-pad", "dropout-train", "to-copy-device", "split-empty-piece",
         "pad-bool", "slice-scatter-bool"],
)
def test_validators_reject_unsupported_arguments(fn, args, target) -> None:
    gm = export_graph(fn, args)
    assert not converters.is_convertible(_node(gm, target))


def test_getitem_follows_its_producer() -> None:
    gm = export_graph(lambda x: A.max_pool2d_with_indices.default(x, [2, 2]), (torch.randn(1, 1, 4, 4),))
    getitems = [n for n in gm.graph.nodes if is_getitem(n)]
    assert getitems and not any(converters.is_convertible(n) for n in getitems)
    gm = export_graph(lambda x: A.max_pool2d_with_indices.default(x, [2, 2])[0], (torch.randn(1, 1, 4, 4),))
    getitems = [n for n in gm.graph.nodes if is_getitem(n)]
    assert getitems and all(converters.is_convertible(n) for n in getitems)


def test_register_duplicate_needs_override_and_snapshot_restores() -> None:
    original = converters.get(A.relu.default)
    before = converters.registered_targets()

    def replacement(ctx, node):  # throwaway converter
        return ctx.name(node.args[0])

    with converters.Snapshot():
        with pytest.raises(ValueError, match="already registered"):
            converters.register(A.relu.default)(replacement)
        converters.register(A.relu.default, override=True)(replacement)
        assert converters.get(A.relu.default).fn is replacement
        converters.register(A.lgamma.default)(replacement)
        assert A.lgamma.default in converters.registered_targets()
        assert converters.unregister(A.sigmoid.default) is not None
    assert converters.get(A.relu.default) is original
    assert converters.registered_targets() == before


def test_register_rejects_packets() -> None:
    with pytest.raises(TypeError, match="overloads"):
        converters.register(A.relu)(lambda ctx, node: "")


def test_conversion_asks_a_validator_only_what_partitioning_did_not() -> None:
    """Partitioning judged every node; conversion takes that verdict (``Reason.converter``) instead of running the
    validator again, but only from the converter registered now: one replaced in between judges anew."""
    import trtcheck
    from trtcheck.compiler.convert import convert

    class SinCos(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x).cos() + 1

    model, inputs = SinCos(), (torch.randn(3, 4),)
    asked: list[str] = []
    original = converters.get(A.sin.default)

    def counting(node):
        asked.append(node.name)
        return original.validator(node)

    with converters.Snapshot():
        converters.register(A.sin.default, validator=counting, override=True)(original.fn)
        conversion = convert(model, inputs, trtcheck.Settings(min_block_size=1))
        assert len(conversion.onnx_models) == 1 and not conversion.errors
        assert asked == ["sin"]  # partitioning asked; conversion did not ask again
        sin = next(n for n in conversion.graph_module.graph.nodes if n.target is A.sin.default)
        assert conversion.partition.reasons[sin].converter is converters.get(A.sin.default)

        refusing = []

        def refuse(node):  # registered after partitioning: conversion must ask it
            refusing.append(node.name)
            return False

        converters.register(A.sin.default, validator=refuse, override=True)(original.fn)
        errors = trtcheck.compiler.convert.convert_segments(conversion.partition, trtcheck.compiler.clock.Clock())[1]
        assert refusing == ["sin"] and "rejects" in str(errors[0])


def test_a_snapshot_restores_trtchecks_own_converters_too() -> None:
    """A throwaway registered the built-in way inside a ``Snapshot`` (as trtcheck's converter tests do) replaced the
    op's entry among the built-ins for good: a later test in the same worker read ``builtin(relu)`` as the throwaway,
    and a repro recorded a kept built-in validator as not trtcheck's (CI's failure of stop 45)."""
    relu = torch.ops.aten.relu.default
    own = registry.builtin(relu)
    with converters.Snapshot():
        converters.unregister(relu)
        _common.converter(relu, dtypes=_common.FLOAT)(lambda ctx, args: ctx.add("Neg", [ctx.name(args.self)]))
        assert registry.builtin(relu) is not own
    assert registry.builtin(relu) is own and converters.get(relu) is own
    assert registry.builtin_owner(own.validator, "validator") == relu
