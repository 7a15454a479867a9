"""Control flow: ``torch.cond`` and ``while_loop`` nodes, and the graphs of their branches.

torch.export keeps a data-dependent ``torch.cond`` (and a ``while_loop``) as one higher-order node whose
branches (a loop's ``cond_fn`` and body) are ``GraphModule`` attributes of the lowered module, read by
``get_attr``; the node's result is a tuple read by ``operator.getitem``. No engine can run such a node, but
its branches are ordinary ATen graphs. As Torch-TensorRT's partitioning design treats loops and conditionals, the node
itself is a Torch segment of its own, marked ``do_not_merge`` (stitching copies it as it is), and each
branch is partitioned on its own, with the same settings, into ``Partition.branches[name]``: engines
then sit inside branches, and ``trtcheck.compiler`` compiles them (``engine_build.build_branches``).

``decisions.decide`` sends the node itself to Torch (reason ``CONTROL_FLOW``, unless the user forced it);
then two small passes, each run by the driver (``driver._partition_graph``) at one point:

* ``isolate_control_flow`` after every segmentation: the node and the ``getitem`` of its result become a
  segment of their own, ``do_not_merge``, so ``merge_adjacent`` never joins it to a neighbour;
* ``partition_branches`` last: each branch, copied with the parent's constants inlined, is partitioned.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from trtcheck.errors import PartitionError
from trtcheck.lowering.graph import copy_graph_module, is_mutable_state
from trtcheck.names import ModuleMatcher
from trtcheck.partitioning.nodes import bound_operands, branch_names, is_control_flow, is_getitem
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target


def isolate_control_flow(segments: list[Segment]) -> list[Segment]:
    """Split every segment holding a control-flow node: the node and the ``getitem``s of its result form a
    ``do_not_merge`` segment between the nodes before it and those after it.

    A segment's nodes are in graph order, so the nodes before the control-flow node never read it and those
    after it never feed it: the split keeps every value defined before it is read. Only Torch segments are
    searched: ``decide`` sent the nodes there, and no rule ever moves a node to TensorRT.
    """
    result: list[Segment] = []
    for segment in segments:
        split = segment.target is Target.TORCH and any(map(is_control_flow, segment.nodes))
        result += _split(segment) if split else [segment]
    return result


def _split(segment: Segment) -> list[Segment]:
    pieces = [Segment(segment.target)]
    own: dict[torch.fx.Node, Segment] = {}  # control-flow node -> its segment
    for node in segment.nodes:
        if is_control_flow(node):
            own[node] = Segment(segment.target, [node], do_not_merge=True)
            pieces += [own[node], Segment(segment.target)]
        elif is_getitem(node) and node.args[0] in own:
            own[node.args[0]].nodes.append(node)
        else:
            pieces[-1].nodes.append(node)
    return [piece for piece in pieces if piece.nodes]


class _Enclosing(ModuleMatcher):
    """Forces every node: the matcher of a branch whose control-flow node lies inside a forced module.

    Branch graphs carry no ``nn_module_stack`` of their own (torch.export leaves it empty), so the module
    that encloses the node, and hence every op of its branches, is known from the node alone.
    """

    __slots__ = ("spec",)

    def __init__(self, spec: str) -> None:
        super().__init__({"": spec})
        self.spec = spec

    def __call__(self, node: torch.fx.Node) -> str | None:
        return self.spec


def branch_modules(parent: ModuleMatcher, node: torch.fx.Node) -> ModuleMatcher:
    """The ``torch_executed_modules`` matcher for the branches of control-flow ``node``: everything forced when
    a forced module encloses ``node``, else the parent's (whose paths branch nodes, without stacks, never hit)."""
    spec = parent(node)
    return parent if spec is None else _Enclosing(spec)


def inline_constants(parent: torch.fx.GraphModule, node: torch.fx.Node, name: str) -> torch.fx.GraphModule:
    """A copy of branch ``name`` of ``node`` whose parameters and constants are its own ``get_attr``s.

    torch.export passes the parent's parameters into a branch as operands, so inside the branch they are
    placeholders: an engine there would take its weights as run-time inputs instead of folding them like any
    other segment does. Each operand that is a parent ``get_attr`` the graph never writes, and that every call
    receives unchanged (not a loop-carried value), becomes a ``get_attr`` of the copy holding the same tensor.
    Mutable state (``is_mutable_state``) stays an input, so every call reads its current value. The copy keeps
    every placeholder, now unused where inlined, so it still takes what the parent's node passes (both branches
    of a cond take the same operands); neither the parent's graph nor the original branch changes.
    """
    branch = copy_graph_module(operator.attrgetter(name)(parent))
    placeholders = [n for n in branch.graph.nodes if n.op == "placeholder"]
    operands = bound_operands(node)
    if len(placeholders) != len(operands):
        raise PartitionError(
            f"branch {name} of {node.name} takes {len(placeholders)} inputs but {node.name} passes {len(operands)}: "
            "the exported graph is malformed; please report it with the model"
        )
    anchor = placeholders[-1] if placeholders else None
    for placeholder, (value, fixed) in zip(placeholders, operands):
        if not (fixed and placeholder.users and _is_constant(parent, value)):
            continue
        attribute = _free_attribute(branch, value.name)  # named as in the parent: l_weight, not p_l_weight
        setattr(branch, attribute, operator.attrgetter(value.target)(parent))
        with branch.graph.inserting_after(anchor):
            constant = branch.graph.get_attr(attribute)
        constant.meta = dict(placeholder.meta)
        placeholder.replace_all_uses_with(constant)
        anchor = constant
    branch.recompile()
    return branch


def _is_constant(parent: torch.fx.GraphModule, value: Any) -> bool:
    return (
        isinstance(value, torch.fx.Node)
        and value.op == "get_attr"
        and not is_mutable_state(value)
        and isinstance(operator.attrgetter(value.target)(parent), torch.Tensor)
    )


def _free_attribute(module: torch.nn.Module, name: str) -> str:
    candidate, suffix = name, 0
    while hasattr(module, candidate):
        suffix += 1
        candidate = f"{name}_{suffix}"
    return candidate


PartitionFn = Callable[[torch.fx.GraphModule, ModuleMatcher, str], Partition]


def partition_branches(partition: Partition, forced_modules: ModuleMatcher, partition_fn: PartitionFn) -> dict[str, Partition]:
    """Partition every branch of every control-flow node of ``partition`` with ``partition_fn`` (the driver, with
    the parent's settings as that branch takes them: it recurses into nested control flow), keyed by branch
    attribute name, which ``partition_fn`` is given too."""
    found: dict[str, Partition] = {}
    for node in partition.graph_module.graph.nodes:
        if is_control_flow(node):
            modules = branch_modules(forced_modules, node)
            for name in branch_names(node):
                if name not in found:
                    found[name] = partition_fn(inline_constants(partition.graph_module, node, name), modules, name)
    return found


