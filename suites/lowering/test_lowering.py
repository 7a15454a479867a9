"""Lowering on its own: ``lower`` and its errors, the graph facts (mutable state, copies), dynamic sizes read
without guards, ``LoweringCache``'s determinism check and trtcheck's corrections to the decomposition table."""

from __future__ import annotations

import itertools

import pytest
import sympy
import torch
import torch.fx
import torch.nn.functional as F
from torch.export import Dim

import trtcheck_zoo
from trtcheck.errors import InputMismatchError, LoweringError
from trtcheck.lowering.decompositions import core_aten_table, kept_whole
from trtcheck.lowering.export import LOWERING_SECONDS, LoweringCache, independent_inputs, lower
from trtcheck.lowering.graph import copy_graph_module, is_mutable_state, own_mutable_state, writes_to
from trtcheck.lowering.symbols import (
    DimRange,
    dim_names,
    dim_range,
    expression_bounds,
    size_hint,
    specialized_symbols,
    symbol_ranges,
    value_bytes,
)

aten = torch.ops.aten


class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).reshape(-1).sin() * 2


class Counter(torch.nn.Module):
    """Writes into its buffer ``n`` and into its input: state and an input mutation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.register_buffer("n", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n.add_(1)
        x.mul_(2)
        return self.fc(x) + self.n


def node(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


@pytest.fixture(scope="module")
def outer():
    torch.manual_seed(0)
    model, inputs = Outer().eval(), (torch.randn(6, 4),)
    return model, inputs, lower(model, inputs)


@pytest.fixture(scope="module")
def counter():
    model = Counter()
    return model, lower(model, (torch.rand(2, 3),))


def dynamic_lowering() -> tuple[Outer, torch.fx.GraphModule, torch.fx.Node]:
    """A fresh lowering over a dynamic batch (6 in the example): fresh, since a guard would fix it for good."""
    model = Outer().eval()
    gm = lower(model, (torch.randn(6, 4),), dynamic_shapes=({0: Dim("batch", min=2, max=16)},))
    (x,) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return model, gm, x


@pytest.fixture(scope="module")
def dynamic():
    return dynamic_lowering()


# --- lower ----------------------------------------------------------------------------------------------------


def test_lower_gives_core_aten_with_a_value_on_every_node_and_the_module_stack(outer):
    model, inputs, gm = outer
    assert calls(gm) and all(isinstance(n.target, torch._ops.OpOverload) and torch.Tag.core in n.target.tags for n in calls(gm))
    assert all(isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes if n.op != "output")
    assert node(gm, "x").meta["val"].shape == (6, 4)
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    assert [value.meta["val"].shape for value in output.args[0]] == [(24,)]
    stacks = {n.name: [path for path, _ in n.meta["nn_module_stack"].values()] for n in calls(gm)}
    assert stacks["addmm"] == ["", "inner", "inner.fc"]  # the Linear, inside inner
    assert stacks["relu"] == ["", "inner"]
    assert stacks["sin"] == [""]
    torch.testing.assert_close(gm(*inputs), model(*inputs))


def test_an_aten_graph_module_is_reused_as_it_is_and_only_gets_its_missing_metadata():
    def fn(x, y):
        return aten.add.Tensor(aten.relu.default(x), aten.sum.dim_IntList(y, [0]))

    gm = torch.fx.symbolic_trace(fn)
    assert not any("val" in n.meta for n in gm.graph.nodes)
    assert lower(gm, (torch.rand(3), torch.rand(2, 3))) is gm
    shapes = {n.name: tuple(n.meta["val"].shape) for n in gm.graph.nodes if n.op != "output"}
    assert shapes == {"x": (3,), "y": (2, 3), "relu_default": (3,), "sum_dim_int_list": (3,), "add_tensor": (3,)}
    values = {n: n.meta["val"] for n in gm.graph.nodes if n.op != "output"}
    assert lower(gm, (torch.rand(3), torch.rand(2, 3))) is gm  # complete metadata: nothing is propagated again
    assert all(n.meta["val"] is value for n, value in values.items())


def test_a_lowered_graph_is_reused_by_a_second_lowering(outer):
    _, inputs, gm = outer
    assert lower(gm, inputs) is gm


TRACES: list[int] = []


class Traced(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        TRACES.append(1)  # a Python side effect: counts how often forward runs (tracing runs it)
        return self.fc(x).cos()


@pytest.mark.slow
def test_an_exported_program_is_lowered_without_tracing_again():
    model, inputs = Traced().eval(), (torch.randn(2, 4),)
    TRACES.clear()
    program = torch.export.export(model, inputs)
    assert len(TRACES) == 1
    gm = lower(program, inputs)
    other = lower(program, (torch.randn(2, 4),))  # new values of the program's own shapes
    assert len(TRACES) == 1  # forward never ran again
    with pytest.raises(InputMismatchError, match="dim 0 is 5, but it is static: 2"):  # other sizes than it was exported for
        lower(program, (torch.randn(5, 4),))
    assert len(TRACES) == 1
    assert node(gm, "x").meta["val"].shape == node(other, "x").meta["val"].shape == (2, 4)
    assert all(torch.Tag.core in n.target.tags for n in calls(gm))
    assert [path for path, _ in node(gm, "addmm").meta["nn_module_stack"].values()] == ["", "fc"]
    torch.testing.assert_close(gm(*inputs), model(*inputs))
    before = len(TRACES)
    lower(model, inputs)
    assert len(TRACES) > before  # lowering the module itself traces it


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


def aten_fn(x, y):
    return aten.add.Tensor(aten.relu.default(x), y)


def test_an_aten_graph_with_dynamic_shapes_is_exported_again_with_its_dims():
    """An ATen GraphModule is used as it is, unless ``dynamic_shapes`` is given: a repro folder's saved graph (issue 25's
    dynamic fuzz failure) is such a graph, and its failure reproduces only when it compiles for the Dims' range. It is
    exported again with them (its static metadata would fix every size at the example's)."""
    n = Dim("n", min=2, max=9)
    gm = lower(torch.fx.symbolic_trace(aten_fn), (torch.rand(3), torch.rand(3)), dynamic_shapes=({0: n}, {0: n}))
    (placeholder, *_) = gm.graph.find_nodes(op="placeholder")
    size = placeholder.meta["val"].shape[0]
    assert isinstance(size, torch.SymInt)
    assert symbol_ranges(gm) == {str(size.node.expr): (2, 9)}


@pytest.mark.parametrize(
    ("model", "inputs", "kwargs", "match"),
    [
        (lambda x: x, (torch.rand(3),), {}, r"expected a torch.nn.Module, .* got function: wrap a function in an nn.Module"),
        (torch.nn.Linear(3, 3), torch.rand(2, 3), {}, r"example_inputs must be a tuple .*, got Tensor: write \(x,\)"),
        (DataDependent(), (torch.rand(3),), {},
         r"(?s)torch.export could not trace DataDependent: Python control flow at .*test_lowering.py:\d+ in forward depends on "
         r"a tensor's values.*Fix: at that line"),
        (
            torch.nn.Linear(3, 3),
            (torch.rand(2, 4),),
            {},
            r"(?s)the example inputs do not fit Linear: eager PyTorch itself fails on them with RuntimeError: .*"
            r"Given: \(\(2, 4\) float32\)\. Fix:",
        ),
        (
            torch.nn.Linear(3, 3),
            (torch.rand(2, 3), torch.rand(2, 3)),
            {},
            r"(?s)the example inputs do not fit Linear: .*TypeError.*Given: \(\(2, 3\) float32, \(2, 3\) float32\)",
        ),
        (
            torch.export.export(torch.nn.ReLU(), (torch.rand(3),)),
            (torch.rand(3),),
            {"dynamic_shapes": ({0: Dim("n")},)},
            r"dynamic_shapes was given with an ExportedProgram.*Fix: pass dynamic_shapes to torch.export.export",
        ),
        (torch.fx.symbolic_trace(aten_fn), (torch.rand(3),), {}, r"the GraphModule has 2 inputs \(x, y\) but 1 example inputs"),
        (
            torch.fx.symbolic_trace(aten_fn),
            (torch.rand(3), torch.rand(4)),
            {},
            r"(?s)could not infer shapes of the GraphModule from the example inputs: RuntimeError.*Fix:",
        ),
    ],
    ids=[
        "not_a_module",
        "inputs_not_a_tuple",
        "not_exportable",
        "inputs_of_the_wrong_shape",
        "too_many_inputs",
        "dynamic_shapes_with_a_program",
        "too_few_inputs_for_a_graph",
        "inputs_a_graph_cannot_take",
    ],
)
def test_each_way_lowering_fails_is_a_lowering_error_naming_the_fix(model, inputs, kwargs, match):
    with pytest.raises(LoweringError, match=match):
        lower(model, inputs, **kwargs)


# --- independent_inputs ---------------------------------------------------------------------------------------


def test_independent_inputs_copies_every_tensor_that_aliases_an_earlier_one():
    x, other = torch.rand(4), torch.rand(4)
    (first, second, view, separate, number), kwargs = independent_inputs((x, x, x[1:], other, 3), {"k": x, "n": "text"})
    assert first is x and separate is other and number == 3 and kwargs["n"] == "text"
    for copy, original in ((second, x), (view, x[1:]), (kwargs["k"], x)):
        assert torch.equal(copy, original)
        assert copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert len({t.untyped_storage().data_ptr() for t in (first, second, view, separate, kwargs["k"])}) == 5


def test_independent_inputs_refuses_a_sparse_tensor():
    with pytest.raises(LoweringError, match=r"an example input is a torch.sparse_coo tensor \(shape \(3,\)\).*x.to_dense\(\)"):
        independent_inputs((torch.rand(3), torch.rand(3).to_sparse()))


# --- graph facts: mutable state, copies -----------------------------------------------------------------------


def test_is_mutable_state_is_a_buffer_the_graph_writes_into(counter):
    _, gm = counter
    assert [n.name for n in gm.graph.nodes if is_mutable_state(n)] == ["n"]
    assert not is_mutable_state(node(gm, "fc_weight"))  # read only
    assert not is_mutable_state(node(gm, "x"))  # written, but an input, not state


def test_writes_to_reads_the_schemas_write_marks(counter):
    _, gm = counter
    copies = [n for n in calls(gm) if n.target is aten.copy_.default]
    state, x = node(gm, "n"), node(gm, "x")
    (into_state,) = [n for n in copies if n.args[0] is state]
    (into_x,) = [n for n in copies if n.args[0] is x]
    assert writes_to(into_state, state) and writes_to(into_x, x)
    assert not writes_to(into_state, into_state.args[1])  # copy_'s source is read, not written
    assert not writes_to(node(gm, "add"), state)  # add reads n
    assert not writes_to(next(n for n in gm.graph.nodes if n.op == "output"), node(gm, "add_1"))


def test_own_mutable_state_gives_the_graph_its_own_buffer_and_leaves_the_model_as_it_was():
    model = Counter()
    gm = lower(model, (torch.rand(2, 3),))
    assert gm.n.data_ptr() == model.n.data_ptr()  # torch.export shares the buffer: running gm would count in model
    own_mutable_state(gm)
    assert gm.n.data_ptr() != model.n.data_ptr()
    assert gm.fc.weight.data_ptr() == model.fc.weight.data_ptr()  # read only: still shared
    x = torch.rand(2, 3)
    gm(x.clone())
    gm(x.clone())
    assert torch.equal(gm.n, torch.tensor([2.0]))
    assert torch.equal(model.n, torch.tensor([0.0]))


@pytest.mark.slow
def test_copy_graph_module_copies_the_graph_and_shares_the_metadata(dynamic):
    model, gm, _ = dynamic
    copy = copy_graph_module(gm)
    assert copy is not gm and copy.graph is not gm.graph
    pairs = list(zip(gm.graph.nodes, copy.graph.nodes))
    assert len(pairs) == len(gm.graph.nodes) == len(copy.graph.nodes)
    assert all(a is not b and a.name == b.name and a.target == b.target for a, b in pairs)
    assert all(a.meta.get("val") is b.meta.get("val") for a, b in pairs)  # the same fake values, one shape environment
    assert symbol_ranges(copy) == symbol_ranges(gm) == {next(iter(symbol_ranges(gm))): (2, 16)}
    assert dim_names(copy) == dim_names(gm) and list(dim_names(copy).values()) == ["batch"]
    sin = next(n for n in copy.graph.nodes if n.target is aten.sin.default)
    sin.target = aten.cos.default
    copy.recompile()
    assert [n.target for n in gm.graph.nodes if n.name == sin.name] == [aten.sin.default]  # the original is untouched
    x = torch.randn(5, 4)
    torch.testing.assert_close(copy(x), model.inner(x).reshape(-1).cos() * 2)
    torch.testing.assert_close(gm(x), model(x))


# --- symbols --------------------------------------------------------------------------------------------------


def test_symbol_ranges_and_dim_names_of_a_dynamic_lowering(dynamic, outer):
    _, gm, x = dynamic
    (symbol,) = {str(d) for d in x.meta["val"].shape if isinstance(d, torch.SymInt)}
    assert symbol_ranges(gm) == {symbol: (2, 16)} and dim_names(gm) == {symbol: "batch"}
    assert symbol_ranges(outer[2]) == {} and dim_names(outer[2]) == {}
    symbol_ranges(gm)[symbol] = (0, 1)  # a copy: the graph's own ranges stay
    assert symbol_ranges(gm) == {symbol: (2, 16)}


def test_size_hint_reads_the_examples_size_without_fixing_the_symbol():
    _, gm, x = dynamic_lowering()
    batch = x.meta["val"].shape[0]
    assert isinstance(batch, torch.SymInt) and size_hint(batch) == 6 and size_hint(4) == 4
    hints = [size_hint(d) for n in gm.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor) for d in n.meta["val"].shape]
    assert 24 in hints  # reshape(-1) of (batch, 4): 4*batch at the example
    assert specialized_symbols(gm) == {}
    assert isinstance(x.meta["val"].shape[0], torch.SymInt)
    symbol = str(batch.node.expr)
    int(batch)  # what size_hint avoids: a guard that fixes the symbol for every copy of the lowering
    assert specialized_symbols(gm) == {symbol: 6}


class NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x).float().sum(0)


def test_a_data_dependent_size_has_no_hint_and_reads_as_zero():
    gm = lower(NonZero(), (torch.tensor([0.0, 1.0, 2.0, 0.0]),))
    nonzero = next(n for n in calls(gm) if n.target is aten.nonzero.default)
    size = nonzero.meta["val"].shape[0]
    assert size_hint(size) == 0 and value_bytes(nonzero) == 0
    (symbol,) = symbol_ranges(gm)
    assert symbol_ranges(gm) == {symbol: (0, 4)}
    assert dim_range(size, symbol_ranges(gm)) == DimRange(0, 1, 4)  # opt: at least 1 without a hint


def test_value_bytes_counts_the_examples_size_and_nothing_for_a_non_tensor(dynamic):
    _, gm, x = dynamic
    assert value_bytes(x) == 6 * 4 * 4
    flat = next(n for n in calls(gm) if n.target is aten.view.default)
    assert value_bytes(flat) == 24 * 4  # (4*batch,) at batch=6
    half = torch.fx.Graph().placeholder("h")
    half.meta["val"] = torch.empty(3, 5, dtype=torch.float16, device="meta")
    assert value_bytes(half) == 30
    count = torch.fx.Graph().placeholder("n")
    count.meta["val"] = 7
    assert value_bytes(count) == 0


def test_expression_bounds_over_the_symbols_ranges():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    assert expression_bounds(2 * s0 + 1, {"s0": (2, 10)}) == (5, 21)
    assert expression_bounds(2 * s0 + 1, {"s0": (2, None)}) == (5, None)
    assert expression_bounds(2 * s0 + 1, {}) == (1, None)  # no range: any size, at least 0
    assert expression_bounds(-s0, {"s0": (2, 10)}) == (-10, -2)
    assert expression_bounds(s0 * s1, {"s0": (2, 3), "s1": (4, 5)}) == (8, 15)
    assert expression_bounds(s0, {"s0": (None, 5)}) == (None, 5)
    assert expression_bounds(sympy.Integer(7), {}) == (7, 7)


def test_dim_range_of_static_and_symbolic_sizes(dynamic):
    _, gm, x = dynamic
    ranges = symbol_ranges(gm)
    assert dim_range(4, ranges) == DimRange(4, 4, 4) and dim_range(4, ranges).is_static and str(dim_range(4, ranges)) == "4"
    batch = x.meta["val"].shape[0]
    assert dim_range(batch, ranges) == DimRange(2, 6, 16) and str(dim_range(batch, ranges)) == "2..6..16"
    flat = next(n for n in calls(gm) if n.target is aten.view.default).meta["val"].shape[0]
    assert dim_range(flat, ranges) == DimRange(8, 24, 64)  # 4*batch
    assert str(dim_range(batch, {})) == "0..6..inf"  # no recorded range: unbounded, at least 0
    assert specialized_symbols(gm) == {}


# --- LoweringCache --------------------------------------------------------------------------------------------


def test_lowering_cache_lowers_once_per_key():
    builds = []

    def build():
        builds.append(1)
        torch.manual_seed(0)
        return Inner().eval(), (torch.randn(2, 4),)

    cache = LoweringCache()
    first = cache.get("inner", build)
    assert len(builds) == 2  # two fresh builds, compared
    assert cache.get("inner", build) is first and len(builds) == 2 and len(cache) == 1
    assert first.meta[LOWERING_SECONDS] > 0
    model, inputs = build()
    torch.testing.assert_close(first(*inputs), model(*inputs))
    once = LoweringCache(twice=False)  # the matrix's: one build
    builds.clear()
    once.get("inner", build)
    assert len(builds) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", trtcheck_zoo.names(exclude_tags=["detection"]))  # never one lowered graph (issue 54)
def test_every_zoo_model_lowers_alike_twice_from_scratch(name):
    """What the matrix's lowering cache no longer checks (it lowers once): two fresh builds of each zoo model lower to
    the same graph and constants, under every kept-whole op set its presets use."""
    from trtcheck.names import resolve_ops
    from trtcheck.presets import DEFAULT_PRESETS, PRESETS

    entry = trtcheck_zoo.get(name)
    keeps = {}
    for preset in DEFAULT_PRESETS:
        settings = PRESETS[preset].settings_for(entry.fallback_module)
        if settings is not None:
            keep = resolve_ops(settings.torch_executed_ops)
            keeps.setdefault(kept_whole(keep), keep)
    cache = LoweringCache()
    for keep in keeps.values():
        cache.get(name, entry.build, entry.dynamic_shapes, keep)  # raises LoweringError naming the difference
    assert len(cache) == len(keeps)


@pytest.mark.slow
def test_lowering_cache_refuses_a_build_whose_constants_change():
    values = itertools.count()

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.full((3,), float(next(values))))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    cache = LoweringCache()
    with pytest.raises(LoweringError, match=r"lowering scaled twice from scratch gave different graphs \(constant scale differs\)"):
        cache.get("scaled", lambda: (Scaled(), (torch.rand(3),)))
    assert len(cache) == 0


@pytest.mark.slow
def test_lowering_cache_refuses_a_build_whose_graph_changes():
    models = itertools.cycle([torch.nn.ReLU, torch.nn.Sigmoid])
    cache = LoweringCache()
    with pytest.raises(LoweringError, match=r"lowering act twice from scratch gave different graphs \(generated code differs\)"):
        cache.get("act", lambda: (next(models)(), (torch.rand(3),)))


# --- decompositions -------------------------------------------------------------------------------------------


KEPT = [
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
]


class Pads(torch.nn.Module):
    def forward(self, x3, x4, x5):
        return (
            F.pad(x3, (1, 2), mode="reflect"),
            F.pad(x4, (1, 1, 2, 0), mode="reflect"),
            F.pad(x5, (1,) * 6, mode="reflect"),
            F.pad(x4, (1, 1, 2, 0), mode="replicate"),
            F.pad(x5, (1,) * 6, mode="replicate"),
        )


@pytest.mark.slow
def test_reflection_and_replication_pads_stay_whole():
    default = torch.export.default_decompositions()
    table = core_aten_table()
    assert all(op in default and op not in table for op in KEPT)  # PyTorch's table would decompose each
    inputs = (torch.randn(1, 2, 5), torch.randn(1, 2, 4, 5), torch.randn(1, 2, 3, 4, 5))
    gm = lower(Pads(), inputs)
    assert [n.target for n in calls(gm)] == KEPT
    for got, expected in zip(gm(*inputs), Pads()(*inputs)):
        torch.testing.assert_close(got, expected)


FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.mark.parametrize(
    ("shapes", "kwargs", "dtype"),
    [
        (((2, 4, 5, 8), (2, 4, 7, 8)), {}, torch.float32),
        (((2, 4, 5, 8), (2, 4, 7, 8)), {"is_causal": True, "scale": 0.3}, torch.float32),
        (((2, 4, 5, 8), (2, 4, 7, 8)), {"attn_mask": "float"}, torch.float32),
        (((2, 4, 5, 8), (2, 2, 7, 8)), {}, torch.float32),
        (((1, 2, 3, 8), (1, 2, 6, 8)), {}, torch.float16),
    ],
    ids=["plain", "causal_scaled", "float_mask", "grouped_query", "half"],
)
def test_the_flash_attention_decomposition_returns_the_ops_logsumexp(shapes, kwargs, dtype):
    torch.manual_seed(0)
    (query_shape, key_shape) = shapes
    q, k, v = torch.randn(query_shape, dtype=dtype), torch.randn(key_shape, dtype=dtype), torch.randn(key_shape, dtype=dtype)
    if kwargs.get("attn_mask") == "float":
        kwargs = {"attn_mask": torch.randn(query_shape[-2], key_shape[-2], dtype=dtype)}
    output, logsumexp = FLASH(q, k, v, **kwargs)
    got_output, got_logsumexp = core_aten_table()[FLASH](q, k, v, **kwargs)
    assert got_logsumexp.shape == logsumexp.shape == query_shape[:3] and got_logsumexp.dtype == logsumexp.dtype
    torch.testing.assert_close(got_logsumexp, logsumexp)
    tolerance = {"atol": 2e-3, "rtol": 2e-3} if dtype == torch.float16 else {}
    torch.testing.assert_close(got_output, output, **tolerance)


class FlashAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return FLASH(q, k, v)


def test_a_lowered_graph_returns_flash_attentions_logsumexp():
    torch.manual_seed(0)
    inputs = (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8))
    _, default_logsumexp = torch.export.default_decompositions()[FLASH](*inputs)
    assert default_logsumexp.shape == (1, 2, 5, 7)  # PyTorch's own: the attention weights instead
    gm = lower(FlashAttention(), inputs)
    assert FLASH not in [n.target for n in calls(gm)]
    output, logsumexp = gm(*inputs)
    expected_output, expected_logsumexp = FLASH(*inputs)
    torch.testing.assert_close(logsumexp, expected_logsumexp)
    torch.testing.assert_close(output, expected_output)
    scores = inputs[0] @ inputs[1].transpose(-2, -1) / 8**0.5
    torch.testing.assert_close(logsumexp, torch.logsumexp(scores, dim=-1))


class _Residual(torch.nn.Module):
    def forward(self, x):
        return x.sin() + x * 2


def test_lowering_a_user_s_graph_module_with_dead_code_leaves_it_without_any():
    """A user's ATen GraphModule with dead code lowers to a copy without it, as ``Graph.eliminate_dead_code`` made it
    (issue 42: now one copy that leaves the dead nodes out); the user's graph keeps its nodes, and the lowered module
    computes what it did."""
    x = torch.randn(3, 4)
    gm = lower(_Residual(), (x,))
    first = next(iter(gm.graph.nodes))
    output = next(node for node in gm.graph.nodes if node.op == "output")
    with gm.graph.inserting_before(output):
        dead = gm.graph.call_function(aten.exp.default, (gm.graph.call_function(aten.neg.default, (first,)),))
    for node in (dead, *dead.all_input_nodes):
        node.meta["val"] = first.meta["val"]
    gm.recompile()
    before = [node.name for node in gm.graph.nodes]
    lowered = lower(gm, (x,))
    assert lowered is not gm and [node.name for node in gm.graph.nodes] == before  # the user's graph as it was
    assert [node.name for node in lowered.graph.nodes] == [name for name in before if name not in {dead.name, dead.args[0].name}]
    torch.testing.assert_close(lowered(x), _Residual()(x))
