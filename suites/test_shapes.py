"""Shape analysis on its own: engine specs and ranges, each boundary value's (min, opt, max) on static and dynamic
partitions, and ``find_mismatches`` catching metadata that lies without touching the caller's tensors or state."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from torch.export import Dim

import trtcheck
from trtcheck.engines.specs import ShapeRange, TensorSpec
from trtcheck.errors import ShapeMismatchError
from trtcheck.lowering.graph import copy_graph_module
from trtcheck.lowering.symbols import DimRange, symbol_ranges
from trtcheck.partitioning.reasons import Target
from trtcheck.shapes import (
    ValueShape,
    confirm_shapes,
    expected_shape,
    find_mismatches,
    observe,
    partition_shapes,
    segment_shapes,
    symbol_values,
    value_shape,
)

aten = torch.ops.aten
SETTINGS = trtcheck.Settings(min_block_size=1)


def no_lgamma(node: torch.fx.Node) -> bool:
    return node.target is not aten.lgamma.default


class Flatten(torch.nn.Module):
    """(n, 4) -> (2n, 2) before lgamma (Torch): three segments, a derived size crossing both boundaries."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.lgamma(x.reshape(-1, 2).abs() + 1.0).sin()


class Counting(torch.nn.Module):
    """Writes into its buffer and into its input, around a Torch op."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        x.mul_(2)
        return torch.lgamma(x.abs() + 1.0).sin() + self.calls


def flatten_partition(dynamic_shapes=None) -> trtcheck.Partition:
    return trtcheck.partition(Flatten(), (torch.randn(6, 4),), SETTINGS, no_lgamma, dynamic_shapes=dynamic_shapes)


def named(partition: trtcheck.Partition, name: str) -> torch.fx.Node:
    return next(n for n in partition.graph_module.graph.nodes if n.name == name)


def boundary(partition: trtcheck.Partition, index: int) -> torch.fx.Node:
    """The one value segment ``index`` hands on."""
    (value,) = partition.segments[index].outputs
    return value


@pytest.fixture(scope="module")
def static():
    return flatten_partition()


@pytest.fixture(scope="module")
def bounded():
    return flatten_partition(({0: Dim("n", min=2, max=10)},))


# --- TensorSpec and ShapeRange --------------------------------------------------------------------------------


def test_tensor_spec_normalises_its_shape_and_matches_any_size_where_dynamic():
    spec = TensorSpec("x", torch.Size([2, 3]), torch.float32)
    assert spec.shape == (2, 3) and type(spec.shape) is tuple
    assert spec == TensorSpec("x", [2, 3], torch.float32) and hash(spec) == hash(TensorSpec("x", (2, 3), torch.float32))
    assert spec.is_static and spec.matches_shape((2, 3))
    assert not spec.matches_shape((2, 4)) and not spec.matches_shape((2, 3, 1)) and not spec.matches_shape((2,))
    dynamic = TensorSpec("x", (-1, 3), torch.float32)
    assert not dynamic.is_static
    assert dynamic.matches_shape((1, 3)) and dynamic.matches_shape((100, 3)) and not dynamic.matches_shape((5, 4))
    assert TensorSpec.like("y", torch.zeros(4, 5, dtype=torch.int64)) == TensorSpec("y", (4, 5), torch.int64)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        (((1, 2), (1, 2), (1, 2, 3)), "must have the same rank"),
        (((-1, 2), (1, 2), (4, 2)), "has a negative dimension"),
        (((2, 2), (1, 2), (4, 2)), r"need min <= opt <= max in every dimension"),
        (((1, 2), (5, 2), (4, 2)), r"need min <= opt <= max in every dimension"),
    ],
    ids=["rank", "negative_min", "opt_below_min", "opt_above_max"],
)
def test_shape_range_refuses_bounds_that_are_no_range(bounds, message):
    with pytest.raises(ValueError, match=message):
        ShapeRange(*bounds)


def test_shape_range_contains_exactly_the_shapes_between_its_bounds():
    shape_range = ShapeRange([1, 4], torch.Size([3, 4]), (8, 4))
    assert shape_range.min == (1, 4) and shape_range.opt == (3, 4) and not shape_range.is_static
    assert shape_range.contains((1, 4)) and shape_range.contains((8, 4)) and shape_range.contains((5, 4))
    assert not shape_range.contains((9, 4)) and not shape_range.contains((0, 4)) and not shape_range.contains((3, 5))
    assert not shape_range.contains((3,)) and not shape_range.contains((3, 4, 1))
    static = ShapeRange.static((2, 3))
    assert static == ShapeRange((2, 3), (2, 3), (2, 3)) and static.is_static
    assert static.contains((2, 3)) and not static.contains((2, 2))


# --- value_shape, segment_shapes, partition_shapes ------------------------------------------------------------


def test_a_static_partition_has_static_specs_and_exact_ranges(static):
    assert [s.target for s in static.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    first = segment_shapes(static.segments[0], symbol_ranges(static.graph_module))
    assert first.inputs == (TensorSpec("x", (6, 4), torch.float32),)
    assert first.outputs == (TensorSpec(boundary(static, 0).name, (12, 2), torch.float32),)
    assert [str(v) for v in first.input_ranges + first.output_ranges] == ["[6, 4] float32", "[12, 2] float32"]
    assert all(v.is_static for v in first.input_ranges) and first.shape_ranges() == {}
    assert first.input_ranges[0].shape_range() == ShapeRange.static((6, 4))


def test_a_dynamic_partition_bounds_each_size_over_the_symbols_range(bounded):
    x, view_out, torch_out = named(bounded, "x"), boundary(bounded, 0), boundary(bounded, 1)
    ranges = symbol_ranges(bounded.graph_module)
    assert value_shape(x, ranges).dims == (DimRange(2, 6, 10), DimRange(4, 4, 4))
    assert value_shape(view_out, ranges).dims == (DimRange(4, 12, 20), DimRange(2, 2, 2))  # 2n
    assert value_shape(view_out, ranges).opt == (12, 2) and not value_shape(view_out, ranges).is_static
    shapes = partition_shapes(bounded)
    assert len(shapes) == 3 and all(s is not None for s in shapes)
    assert shapes[0].inputs == (TensorSpec("x", (-1, 4), torch.float32),)
    assert shapes[0].shape_ranges() == {"x": ShapeRange((2, 4), (6, 4), (10, 4))}
    assert shapes[1].shape_ranges() == {view_out.name: ShapeRange((4, 2), (12, 2), (20, 2))}
    assert shapes[2].shape_ranges() == {torch_out.name: ShapeRange((4, 2), (12, 2), (20, 2))}
    assert shapes[2].outputs == (TensorSpec(boundary(bounded, 2).name, (-1, 2), torch.float32),)


def test_an_unbounded_size_has_no_shape_range():
    partition = flatten_partition(({0: Dim("n")},))
    (symbol,) = symbol_ranges(partition.graph_module)
    assert symbol_ranges(partition.graph_module)[symbol][1] is None
    x = value_shape(named(partition, "x"), symbol_ranges(partition.graph_module))
    assert x.dims[0].max is None and str(x) == "[0..6..inf, 4] float32"
    assert x.shape_range() is None
    assert [s.shape_ranges() for s in partition_shapes(partition)] == [{}, {}, {}]


def test_a_minimum_of_zero_becomes_one_in_the_shape_range():
    partition = flatten_partition(({0: Dim("n", min=0, max=10)},))
    x = value_shape(named(partition, "x"), symbol_ranges(partition.graph_module))
    assert x.dims[0] == DimRange(0, 6, 10)
    assert x.shape_range() == ShapeRange((1, 4), (6, 4), (10, 4))
    empty_static = ValueShape("e", (DimRange(0, 0, 0), DimRange(3, 3, 3)), torch.float32)
    assert empty_static.shape_range() == ShapeRange((0, 3), (0, 3), (0, 3))  # a static 0 stays: it is no range


def test_segment_shapes_without_ranges_counts_every_symbol_unbounded(bounded):
    shapes = segment_shapes(bounded.segments[0])
    assert shapes.input_ranges[0].dims[0] == DimRange(0, 6, None) and shapes.shape_ranges() == {}
    narrower = segment_shapes(bounded.segments[0], {next(iter(symbol_ranges(bounded.graph_module))): (3, 7)})
    assert narrower.shape_ranges() == {"x": ShapeRange((3, 4), (6, 4), (7, 4))}


def test_a_segment_with_a_non_tensor_boundary_has_no_shapes():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    relu = graph.call_function(aten.relu.default, (x,))
    size = graph.call_function(aten.sym_size.int, (relu, 0))
    out = graph.call_function(aten.add.Scalar, (relu, size))
    for value in (x, relu, out):
        value.meta["val"] = torch.empty(3, 4, device="meta")
    size.meta["val"] = 3
    graph.output((out,))
    segments = [trtcheck.Segment(Target.TENSORRT, [relu]), trtcheck.Segment(Target.TORCH, [size]), trtcheck.Segment(Target.TORCH, [out])]
    partition = trtcheck.Partition(torch.fx.GraphModule(torch.nn.Module(), graph), segments, {})
    with pytest.raises(TypeError, match="sym_size_int carries int, not a Tensor: it cannot cross an engine boundary"):
        segment_shapes(segments[2])
    first, *rest = partition_shapes(partition)
    assert first is not None and first.outputs == (TensorSpec("relu_default", (3, 4), torch.float32),)
    assert rest == [None, None]


# --- symbol_values and expected_shape -------------------------------------------------------------------------


def test_symbol_values_are_read_off_the_inputs_and_evaluate_derived_sizes(bounded):
    gm = bounded.graph_module
    batch = named(bounded, "x").meta["val"].shape[0]
    values = symbol_values(gm, [torch.rand(9, 4)])
    assert values == {batch.node.expr: 9}
    assert symbol_values(gm, [torch.rand(9)]) == {}  # another rank: nothing to read
    assert symbol_values(gm, [3]) == {}
    flat = boundary(bounded, 0).meta["val"]
    assert expected_shape(flat, values) == (18, 2)
    assert expected_shape(flat, {}) == (-1, 2)  # the symbol is unknown
    assert expected_shape(torch.empty(5, 2, device="meta"), {}) == (5, 2)


# --- find_mismatches ------------------------------------------------------------------------------------------


def test_find_mismatches_finds_nothing_when_the_metadata_is_true(static, bounded):
    assert find_mismatches(static, [torch.randn(6, 4)]) == []
    for rows in (2, 6, 10):  # every symbolic size checked against its expression at this size
        assert find_mismatches(bounded, [torch.randn(rows, 4)]) == []
    with pytest.raises(ShapeMismatchError, match="expected 1 flat inputs, got 2"):
        find_mismatches(static, [torch.randn(6, 4), torch.randn(6, 4)])


def test_find_mismatches_finds_a_value_whose_metadata_lies():
    partition = flatten_partition()
    lying = boundary(partition, 0)
    lying.meta["val"] = torch.empty(4, 6, device="meta")
    (mismatch,) = find_mismatches(partition, [torch.randn(6, 4)])
    assert mismatch.segment == 0 and mismatch.node is lying
    assert str(mismatch) == f"segment @0: {lying.name} is [12, 2] torch.float32, metadata says [4, 6] torch.float32"
    with pytest.raises(ShapeMismatchError, match=rf"segment @0: {lying.name} is \[12, 2\]"):
        confirm_shapes(partition, [torch.randn(6, 4)])


def test_find_mismatches_reports_every_lie_and_a_wrong_dtype():
    partition = flatten_partition()
    first, second = boundary(partition, 0), boundary(partition, 1)
    first.meta["val"] = torch.empty(12, 2, dtype=torch.float64, device="meta")
    second.meta["val"] = torch.empty(2, 12, device="meta")
    mismatches = find_mismatches(partition, [torch.randn(6, 4)])
    assert [(m.segment, m.node) for m in mismatches] == [(0, first), (1, second)]
    assert mismatches[0].expected == "[12, 2] torch.float64" and mismatches[0].got == "[12, 2] torch.float32"


def test_a_symbolic_size_is_checked_against_its_value_for_this_run():
    partition = flatten_partition(({0: Dim("n", min=2, max=10)},))
    lying = boundary(partition, 0)
    lying.meta["val"] = named(partition, "x").meta["val"]  # says (n, 4) where the value is (2n, 2)
    (mismatch,) = find_mismatches(partition, [torch.randn(8, 4)])
    assert mismatch.node is lying and mismatch.expected == "[8, 4] torch.float32" and mismatch.got == "[16, 2] torch.float32"


def test_find_mismatches_leaves_the_callers_tensors_and_the_graphs_state_unchanged():
    model = Counting()
    partition = trtcheck.partition(model, (torch.rand(3, 4),), SETTINGS, no_lgamma)
    gm = partition.graph_module
    assert [s.target for s in partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    state = gm.calls
    x = torch.rand(3, 4)
    before = x.clone()
    lying = named(partition, "add_1")  # abs(2x) + 1, read by lgamma in the Torch segment
    lying.meta["val"] = torch.empty(4, 3, device="meta")
    (mismatch,) = find_mismatches(partition, [x])
    assert mismatch.node is lying and mismatch.got == "[3, 4] torch.float32"
    assert torch.equal(x, before)  # forward doubles x in place: find_mismatches ran on a copy
    assert gm.calls is state and torch.equal(state, torch.zeros(1))  # the count went back, in place
    assert torch.equal(model.calls, torch.zeros(1))
    assert len(find_mismatches(partition, [x])) == 1  # and a second run sees what the first saw
    assert torch.equal(gm.calls, torch.zeros(1)) and torch.equal(x, before)


# --- one observation, every partition -------------------------------------------------------------------------


def _fails_after_lgamma(partition: trtcheck.Partition) -> torch.fx.Node:
    """Make the Torch segment's lgamma really fail on the example inputs (an impossible view of its input)."""
    (lgamma,) = [n for n in partition.graph_module.graph.nodes if n.target is aten.lgamma.default]
    with partition.graph_module.graph.inserting_before(lgamma):
        view = partition.graph_module.graph.call_function(aten.view.default, (lgamma.args[0], [5, 5]))
    view.meta = dict(lgamma.args[0].meta)
    lgamma.args = (view,)
    partition.segments[1].nodes.insert(0, view)
    return lgamma


def test_a_node_failing_on_the_examples_is_the_models_error_unless_a_lie_came_first():
    partition = flatten_partition()
    _fails_after_lgamma(partition)
    with pytest.raises(RuntimeError, match=r"shape '\[5, 5\]' is invalid"):
        find_mismatches(partition, [torch.randn(6, 4)])
    lying = boundary(partition, 0)  # what segment 0 hands to the failing one
    lying.meta["val"] = torch.empty(5, 5, device="meta")
    (mismatch,) = find_mismatches(partition, [torch.randn(6, 4)])  # the lie is the likely cause: reported, not raised
    assert mismatch.node is lying and mismatch.got == "[12, 2] torch.float32"


def test_one_observation_serves_every_partition_of_its_graph():
    model, x = Flatten(), torch.randn(6, 4)
    lowered = trtcheck.lower(model, (x,))
    observation = observe(lowered, [x])
    assert observation.covers(lowered.graph) and observation.failed_at is None
    shapes = {name: seen[1:] for name, seen in observation.values.items()}
    assert shapes[next(n.name for n in lowered.graph.nodes if n.target is aten.lgamma.default)] == ((12, 2), torch.float32)
    for support in (no_lgamma, None):  # three segments, then one, each on a copy of the graph: both from the one run
        partition = trtcheck.partition(copy_graph_module(lowered), (x,), SETTINGS, support)
        assert partition.graph_module.graph is not lowered.graph and observation.covers(partition.graph_module.graph)
        assert find_mismatches(partition, [x], observation) == find_mismatches(partition, [x]) == []
    partition = trtcheck.partition(copy_graph_module(lowered), (x,), SETTINGS, no_lgamma)
    lying = boundary(partition, 0)
    lying.meta["val"] = torch.empty(4, 6, device="meta")
    (mismatch,) = find_mismatches(partition, [x], observation)  # the metadata is read anew, the run is not repeated
    assert mismatch.node is lying and mismatch.got == "[12, 2] torch.float32"
    (sin,) = [n for n in partition.graph_module.graph.nodes if n.target is aten.sin.default]
    sin.args = (sin.args[0].args[0],)  # rewired under the same names: not the graph observed
    assert not observation.covers(partition.graph_module.graph)


def test_an_observation_of_another_graph_is_not_used():
    x = torch.randn(6, 4)
    other = observe(trtcheck.lower(Counting(), (x.clone(),)), [x.clone()])
    partition = flatten_partition()
    assert not other.covers(partition.graph_module.graph)
    lying = boundary(partition, 0)
    lying.meta["val"] = torch.empty(4, 6, device="meta")
    (mismatch,) = find_mismatches(partition, [x], other)  # ran this graph instead of trusting the other's values
    assert mismatch.node is lying


def test_compile_runs_a_reused_lowering_once_per_example_inputs(monkeypatch):
    """The matrix compiles one lowering under several presets: shape analysis runs the model once for all of them,
    and again for other inputs (values, signed zeros, strides), a lowering whose weights changed in place, or a
    graph whose nodes differ; a run that failed is not kept."""
    import trtcheck.compiler.convert as convert_module
    from trtcheck.shapes import _Observer

    runs = []
    real = _Observer.run
    monkeypatch.setattr(_Observer, "run", lambda self, *args: runs.append(self) or real(self, *args))
    model, x = Flatten(), torch.randn(6, 4)
    lowered = trtcheck.lower(model, (x,))
    for settings in (SETTINGS, trtcheck.Settings(min_block_size=3), trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sin"])):
        conversion = convert_module.convert(model, (x.clone(),), settings, support=no_lgamma, lowered=lowered)
        assert not conversion.mismatched
    assert len(runs) == 1
    convert_module.convert(model, (torch.randn(6, 4),), SETTINGS, support=no_lgamma, lowered=lowered)
    assert len(runs) == 2  # other values: run again
    zero = torch.zeros(6, 4)
    convert_module.convert(model, (zero,), SETTINGS, lowered=lowered)
    assert len(runs) == 3
    convert_module.convert(model, (torch.zeros(7, 4)[1:],), SETTINGS, lowered=lowered)
    assert len(runs) == 4  # the same values at another offset of their storage
    with pytest.raises(RuntimeError, match="view size is not compatible"):  # and strides: what a view accepts
        convert_module.convert(model, (zero.t().contiguous().t(),), SETTINGS, lowered=lowered)
    assert len(runs) == 5
    convert_module.convert(model, (torch.zeros(6, 4),), SETTINGS, lowered=lowered)
    assert len(runs) == 5  # the same values and layout as the last run kept (the failed one was not kept)
    convert_module.convert(model, (-zero,), SETTINGS, lowered=lowered)
    assert len(runs) == 6  # -0.0 is not 0.0
    convert_module.convert(model, (x.clone(),), SETTINGS, support=no_lgamma)
    assert len(runs) == 7  # no lowering given: nothing to keep the run with
    # A lie in the kept lowering's metadata is still found: the observation holds values, the metadata is read anew.
    (lgamma_input,) = [n.args[0] for n in lowered.graph.nodes if n.target is aten.lgamma.default]
    lgamma_input.meta["val"] = torch.empty(4, 6, device="meta")
    conversion = convert_module.convert(model, (-zero,), SETTINGS, support=no_lgamma, lowered=lowered)
    assert len(runs) == 7 and sorted(conversion.mismatched) == [0]  # the values kept last (a failed run keeps none)

    linear, y = torch.nn.Linear(4, 3), torch.randn(2, 4)
    lowered = trtcheck.lower(linear, (y,))
    convert_module.convert(linear, (y,), SETTINGS, lowered=lowered)
    convert_module.convert(linear, (y,), SETTINGS, lowered=lowered)
    assert len(runs) == 8
    with torch.no_grad():
        next(lowered.parameters()).add_(1.0)  # changed in place (load_state_dict, an optimizer step)
    convert_module.convert(linear, (y,), SETTINGS, lowered=lowered)
    assert len(runs) == 9


class NotPositiveDefinite(torch.nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(a) + 1


def test_a_run_that_fails_is_not_kept_and_raises_the_models_own_error():
    import trtcheck.compiler.convert as convert_module
    from trtcheck.shapes import OBSERVED

    model, a = NotPositiveDefinite(), -torch.eye(3)  # traced on fake tensors, it fails only when it really runs
    lowered = trtcheck.lower(model, (a,))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cholesky") as raised:
            convert_module.convert(model, (a,), SETTINGS, lowered=lowered)
        assert "While executing" not in str(raised.value)  # the model's error as its op raised it
        assert OBSERVED not in lowered.meta
