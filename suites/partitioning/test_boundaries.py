"""The boundary rules on hand-built graphs: each row of ``boundaries``' table, ``GraphMustChange``, the size
computations the copy rule may move into Torch, and ``min_block_size``.

Every graph here is a ``torch.fx.Graph`` built node by node with its ``meta["val"]`` (meta tensors, plain
ints), given targets by hand and segmented with ``dependency_aware``, as the driver does.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx

from trtcheck.errors import GraphMustChange
from trtcheck.partitioning.boundaries import apply_min_block_size, enforce_tensor_boundaries
from trtcheck.partitioning.nodes import is_size_computation
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target
from trtcheck.partitioning.segmentation import dependency_aware

aten = torch.ops.aten
TRT, TORCH = Target.TENSORRT, Target.TORCH


def tensor(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def scale_of(x):
    """A Python function returning an int: no size computation, so the copy rule leaves it alone."""
    return 2


class Builder:
    """A ``torch.fx.Graph`` built one node at a time, each with its traced value."""

    def __init__(self) -> None:
        self.graph = torch.fx.Graph()

    def input(self, name: str, value) -> torch.fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = value
        return node

    def call(self, target, args: tuple, value, name: str | None = None) -> torch.fx.Node:
        node = self.graph.create_node("call_function", target, args, name=name)
        node.meta["val"] = value
        return node

    def output(self, *values: torch.fx.Node) -> None:
        self.graph.output(values)


class Partitioned:
    """Targets (every compute node TensorRT unless named in ``torch``), reasons and segments of a graph."""

    def __init__(self, graph: torch.fx.Graph, torch_nodes: tuple[str, ...] = ()) -> None:
        self.graph = graph
        self.targets = {n: TORCH if n.name in torch_nodes else TRT for n in self.compute_nodes()}
        self.reasons = {n: Reason(ReasonKind.CONVERTIBLE if self.targets[n] is TRT else ReasonKind.FORCED_OP) for n in self.targets}
        self.resegment()

    def compute_nodes(self) -> list[torch.fx.Node]:
        return [n for n in self.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]

    def resegment(self) -> None:
        self.segments = dependency_aware(self.compute_nodes(), self.targets)

    def enforce(self, may_change_graph: bool = True) -> bool:
        return enforce_tensor_boundaries(self.graph, self.segments, self.targets, self.reasons, may_change_graph)

    def settle(self) -> int:
        """Enforce and re-segment until nothing changes, as the driver does; the number of changing rounds."""
        rounds = 0
        while self.enforce():
            rounds += 1
            self.resegment()
        return rounds

    def names(self) -> list[tuple[Target, list[str]]]:
        return [(s.target, [n.name for n in s.nodes]) for s in self.segments]

    def node(self, name: str) -> torch.fx.Node:
        return next(n for n in self.graph.nodes if n.name == name)

    def has(self, name: str) -> bool:
        return any(n.name == name for n in self.graph.nodes)


def size_read_by(consumer_target: Target) -> Partitioned:
    """``size`` (TensorRT) is made in the first TensorRT segment and read by ``add`` after a Torch ``lgamma``.

    x -> size = sym_size(x, 0), relu -> lgamma (Torch: closes the TensorRT list) -> add(lgamma, size)
    """
    b = Builder()
    x = b.input("x", tensor(2, 3))
    size = b.call(aten.sym_size.int, (x, 0), 2, "size")
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    lgamma = b.call(aten.lgamma.default, (relu,), tensor(2, 3), "lgamma")
    add = b.call(aten.add.Scalar, (lgamma, size), tensor(2, 3), "add")
    b.output(add)
    return Partitioned(b.graph, ("lgamma",) if consumer_target is TRT else ("lgamma", "add"))


# --- TensorRT -> TensorRT: copied into the consumer ---------------------------------------------------------


def test_trt_to_trt_non_tensor_is_copied_into_the_consumers_segment():
    p = size_read_by(TRT)
    assert p.names() == [(TRT, ["size", "relu"]), (TORCH, ["lgamma"]), (TRT, ["add"])]
    assert p.enforce() is True
    copy = p.segments[2].nodes[0]
    assert copy.target is aten.sym_size.int and copy.args == (p.node("x"), 0) and copy.meta["val"] == 2
    assert p.node("add").args == (p.node("lgamma"), copy)
    assert not p.has("size")  # no user left: the original is gone, from the graph and the targets
    assert all(n.name != "size" for n in (*p.targets, *p.reasons))
    assert p.targets[copy] is TRT and p.reasons[copy].kind is ReasonKind.CONVERTIBLE
    assert p.reasons[copy].detail.startswith("copy of size: its non-Tensor result is recomputed in the TensorRT segment")
    p.graph.lint()
    p.resegment()
    assert p.names() == [(TRT, ["relu"]), (TORCH, ["lgamma"]), (TRT, [copy.name, "add"])]
    assert p.enforce() is False  # the copy reads a graph input's Tensor only: nothing left to fix


def test_a_copy_is_shared_by_every_reader_in_the_segment_and_the_original_stays_for_its_own():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    size = b.call(aten.sym_size.int, (x, 0), 2, "size")
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    kept = b.call(aten.mul.Scalar, (relu, size), tensor(2, 3), "kept")  # a reader in the producer's own segment
    lgamma = b.call(aten.lgamma.default, (kept,), tensor(2, 3), "lgamma")
    first = b.call(aten.add.Scalar, (lgamma, size), tensor(2, 3), "first")
    second = b.call(aten.sub.Scalar, (first, size), tensor(2, 3), "second")
    b.output(second)
    p = Partitioned(b.graph, ("lgamma",))
    assert p.enforce() is True
    (copy,) = [n for n in p.segments[2].nodes if n.target is aten.sym_size.int]
    assert p.segments[2].nodes.index(copy) == 0
    assert first.args[1] is copy and second.args[1] is copy
    assert kept.args[1] is size and p.has("size") and p.targets[size] is TRT  # still read in its segment


def test_a_chain_of_non_tensor_producers_moves_over_one_link_per_round():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    size = b.call(aten.sym_size.int, (x, 0), 2, "size")
    double = b.call(operator.mul, (size, 2), 4, "double")
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    lgamma = b.call(aten.lgamma.default, (relu,), tensor(2, 3), "lgamma")
    add = b.call(aten.add.Scalar, (lgamma, double), tensor(2, 3), "add")
    b.output(add)
    p = Partitioned(b.graph, ("lgamma",))
    assert p.settle() == 2  # double's copy first, then size's copy for the copy of double
    assert p.names()[0] == (TRT, ["relu"]) and p.names()[1] == (TORCH, ["lgamma"])
    last = p.segments[2].nodes
    assert [n.target for n in last] == [aten.sym_size.int, operator.mul, aten.add.Scalar]
    assert last[1].args == (last[0], 2) and add.args == (lgamma, last[1])
    assert not p.has("size") and not p.has("double")
    p.graph.lint()


# --- TensorRT -> Torch -------------------------------------------------------------------------------------


def test_trt_size_computation_read_by_torch_is_copied_into_the_torch_segment():
    p = size_read_by(TORCH)
    assert p.names() == [(TRT, ["size", "relu"]), (TORCH, ["lgamma", "add"])]
    assert p.enforce() is True
    copy = p.node("add").args[1]
    assert copy.target is aten.sym_size.int and copy in p.segments[1].nodes
    assert p.segments[1].nodes.index(copy) == p.segments[1].nodes.index(p.node("add")) - 1  # just before its user
    assert p.targets[copy] is TORCH and p.reasons[copy].kind is ReasonKind.NON_TENSOR_BOUNDARY
    assert p.reasons[copy].detail == "copy of size = 2 (int): a size computation recomputed in the Torch segment that reads it"
    assert not p.has("size") and p.targets[p.node("relu")] is TRT  # relu stays in TensorRT
    p.graph.lint()


def other_int_read_by_torch() -> Partitioned:
    """x -> relu -> scale_of(relu) (an int, no size computation) read by Torch ``add``."""
    b = Builder()
    x = b.input("x", tensor(2, 3))
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    scale = b.call(scale_of, (relu,), 2, "scale")
    lgamma = b.call(aten.lgamma.default, (relu,), tensor(2, 3), "lgamma")
    add = b.call(aten.add.Scalar, (lgamma, scale), tensor(2, 3), "add")
    b.output(add)
    return Partitioned(b.graph, ("lgamma", "add"))


def test_trt_producer_of_another_non_tensor_read_by_torch_falls_back():
    p = other_int_read_by_torch()
    assert p.names() == [(TRT, ["relu", "scale"]), (TORCH, ["lgamma", "add"])]
    nodes = list(p.graph.nodes)
    assert p.enforce() is True
    assert list(p.graph.nodes) == nodes  # no copy: the graph is as it was
    scale = p.node("scale")
    assert p.targets[scale] is TORCH and p.reasons[scale] == Reason(
        ReasonKind.NON_TENSOR_BOUNDARY, "its non-Tensor result 2 (int) is read by Torch node add"
    )
    assert p.targets[p.node("relu")] is TRT and p.reasons[p.node("relu")].kind is ReasonKind.CONVERTIBLE
    p.resegment()
    assert p.names() == [(TRT, ["relu"]), (TORCH, ["scale", "lgamma", "add"])]
    assert p.enforce() is False


# --- TensorRT -> graph output ------------------------------------------------------------------------------


def test_trt_producer_of_a_non_tensor_graph_output_falls_back():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    size = b.call(aten.sym_size.int, (relu, 0), 2, "size")  # a size computation, yet no segment to copy it into
    b.output(relu, size)
    p = Partitioned(b.graph)
    assert p.names() == [(TRT, ["relu", "size"])]
    assert p.enforce(may_change_graph=False) is True
    assert p.targets[size] is TORCH and p.reasons[size] == Reason(
        ReasonKind.NON_TENSOR_BOUNDARY, "returns the non-Tensor value 2 (int) from the graph"
    )
    assert p.targets[relu] is TRT
    p.resegment()
    assert p.names() == [(TRT, ["relu"]), (TORCH, ["size"])]
    assert p.enforce() is False  # a Torch producer may return anything


# --- Torch or graph input -> TensorRT ----------------------------------------------------------------------


def test_torch_producer_read_by_trt_makes_the_consumer_fall_back():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    size = b.call(aten.sym_size.int, (x, 0), 2, "size")
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    add = b.call(aten.add.Scalar, (relu, size), tensor(2, 3), "add")
    b.output(add)
    p = Partitioned(b.graph, ("size",))
    assert p.names() == [(TORCH, ["size"]), (TRT, ["relu", "add"])]
    assert p.enforce(may_change_graph=False) is True
    assert p.targets[size] is TORCH and p.reasons[size].kind is ReasonKind.FORCED_OP  # the producer is left alone
    assert p.targets[add] is TORCH and p.reasons[add] == Reason(
        ReasonKind.NON_TENSOR_BOUNDARY, "reads the non-Tensor value of Torch node size: 2 (int)"
    )
    assert p.targets[relu] is TRT


def test_a_non_tensor_graph_input_read_by_trt_makes_the_consumer_fall_back():
    b = Builder()
    x, n = b.input("x", tensor(2, 3)), b.input("n", 3)
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    add = b.call(aten.add.Scalar, (relu, n), tensor(2, 3), "add")
    b.output(add)
    p = Partitioned(b.graph)
    assert p.enforce(may_change_graph=False) is True
    assert p.targets[add] is TORCH and p.reasons[add] == Reason(
        ReasonKind.NON_TENSOR_BOUNDARY, "reads the non-Tensor value of graph input n: 3 (int)"
    )
    assert p.targets[relu] is TRT and n not in p.targets


def test_torch_to_torch_and_edges_inside_a_segment_need_nothing():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    size = b.call(aten.sym_size.int, (x, 0), 2, "size")
    lgamma = b.call(aten.lgamma.default, (x,), tensor(2, 3), "lgamma")
    add = b.call(aten.add.Scalar, (lgamma, size), tensor(2, 3), "add")
    relu = b.call(aten.relu.default, (add,), tensor(2, 3), "relu")
    width = b.call(aten.sym_size.int, (relu, 1), 3, "width")
    out = b.call(aten.mul.Scalar, (relu, width), tensor(2, 3), "out")
    b.output(out)
    p = Partitioned(b.graph, ("size", "lgamma", "add"))
    assert p.names() == [(TORCH, ["size", "lgamma", "add"]), (TRT, ["relu", "width", "out"])]
    targets, nodes = dict(p.targets), list(p.graph.nodes)
    assert p.enforce(may_change_graph=False) is False
    assert p.targets == targets and list(p.graph.nodes) == nodes


# --- GraphMustChange ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("consumer", [TRT, TORCH], ids=["trt_consumer", "torch_consumer_of_a_size"])
def test_a_copy_with_may_change_graph_false_raises_graph_must_change_and_changes_nothing(consumer):
    p = size_read_by(consumer)
    nodes, targets = list(p.graph.nodes), dict(p.targets)
    with pytest.raises(GraphMustChange, match="^size$"):
        p.enforce(may_change_graph=False)
    assert list(p.graph.nodes) == nodes and p.targets == targets
    assert p.node("add").args[1] is p.node("size")


def test_a_fallback_needs_no_graph_change():
    p = other_int_read_by_torch()
    nodes = list(p.graph.nodes)
    assert p.enforce(may_change_graph=False) is True
    assert p.targets[p.node("scale")] is TORCH and list(p.graph.nodes) == nodes


# --- is_size_computation ------------------------------------------------------------------------------------


def test_is_size_computation():
    b = Builder()
    x = b.input("x", tensor(2, 3))
    n = b.input("n", 3)
    sizes = [
        b.call(aten.sym_size.int, (x, 0), 2),
        b.call(aten.sym_numel.default, (x,), 6),
        b.call(aten.sym_stride.int, (x, 0), 3),
        b.call(operator.mul, (n, 2), 6),
        b.call(operator.floordiv, (n, 2), 1),
        b.call(torch.sym_max, (n, 2), 3),
    ]
    others = [
        n,  # a graph input, not a computation
        b.call(aten.relu.default, (x,), tensor(2, 3)),  # a Tensor
        b.call(scale_of, (x,), 2),  # an int from a Python function
        b.call(aten._local_scalar_dense.default, (x,), 1),  # an int read from data, not from sizes
        b.call(operator.eq, (n, 3), True),  # a bool
        b.call(operator.getitem, (x, 0), tensor(3)),
    ]
    assert [is_size_computation(node) for node in sizes] == [True] * len(sizes)
    assert [is_size_computation(node) for node in others] == [False] * len(others)


# --- min_block_size -----------------------------------------------------------------------------------------


def blocks() -> Partitioned:
    """TensorRT [relu] (1 node), Torch [lgamma], TensorRT [maximum, getitem, getitem, neg] (2 counted: no getitems)."""
    b = Builder()
    x = b.input("x", tensor(2, 3))
    relu = b.call(aten.relu.default, (x,), tensor(2, 3), "relu")
    lgamma = b.call(aten.lgamma.default, (relu,), tensor(2, 3), "lgamma")
    pair = b.call(aten.max.dim, (lgamma, 1), (tensor(2), tensor(2, dtype=torch.int64)), "maximum")
    values = b.call(operator.getitem, (pair, 0), tensor(2), "values")
    indices = b.call(operator.getitem, (pair, 1), tensor(2, dtype=torch.int64), "indices")
    neg = b.call(aten.neg.default, (values,), tensor(2), "neg")
    b.output(neg, indices)
    return Partitioned(b.graph, ("lgamma",))


def test_min_block_size_sends_small_trt_segments_to_torch_and_says_the_count():
    p = blocks()
    assert p.names() == [(TRT, ["relu"]), (TORCH, ["lgamma"]), (TRT, ["maximum", "values", "indices", "neg"])]
    assert [s.size for s in p.segments] == [1, 1, 2]
    assert apply_min_block_size(p.segments, 2, p.targets, p.reasons) is True
    relu = p.node("relu")
    assert p.targets[relu] is TORCH
    assert p.reasons[relu] == Reason(ReasonKind.MIN_BLOCK_SIZE, "its TensorRT segment had 1 compute node < min_block_size=2")
    assert {p.targets[p.node(name)] for name in ("maximum", "values", "indices", "neg")} == {TRT}
    assert p.reasons[p.node("lgamma")].kind is ReasonKind.FORCED_OP  # a Torch segment is never touched


def test_getitem_does_not_count_toward_min_block_size():
    p = blocks()
    assert apply_min_block_size(p.segments, 3, p.targets, p.reasons) is True  # 4 nodes, but 2 count
    for name in ("maximum", "values", "indices", "neg"):
        node = p.node(name)
        assert p.targets[node] is TORCH
        assert p.reasons[node].detail == "its TensorRT segment had 2 compute nodes < min_block_size=3"


def test_min_block_size_of_one_moves_nothing():
    p = blocks()
    targets, reasons = dict(p.targets), dict(p.reasons)
    assert apply_min_block_size(p.segments, 1, p.targets, p.reasons) is False
    assert p.targets == targets and p.reasons == reasons
