"""Constant folding: what depends only on weights is computed once, when lowering, never by an engine.

A model that standardizes its weights every call (timm's NFNets: a batch norm on batch statistics of each
convolution's weight), or builds a mask from constants (swin's shifted windows), puts work in the graph whose
inputs are all parameters, buffers or constants. Left there, each such island is more nodes to convert and, where a
converter refuses one, a Torch segment of its own: NFNet-F0 was 114 segments. Torch-TensorRT folds them when lowering
(``constant_fold``, skipping quantize ops); so does this, as a pure proposal (``propose_folding``: which nodes,
which of them to keep as constants) before the rewrite (``fold_constants``).

What is never folded: a result that is only a view, copy or cast of weights (``_CHEAP``), or that reads no weight
(a constructor's value alone, such as ``full``); a node that reads a buffer the graph writes (state, not a
constant); a random or impure node; an uninitialized ``empty``; a quantize op (TensorRT needs explicit Q/DQ on
weights to build its INT8/FP8 kernels); a node with a symbolic size; and a result larger than the weights it comes
from (an ``expand`` to a large size is cheaper to compute in the engine than to store), unless it is small
(``SMALL``). The folded value is what PyTorch computes for it, in the weights' dtype and on their device, as eager
does on every call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.lowering.graph import constant_tensor, is_mutable_state

__all__ = ["FOLDED", "SMALL", "FoldPlan", "fold_constants", "propose_folding"]

FOLDED = "trtcheck_folded_ops"
"""``GraphModule.meta`` key: the ops ``fold_constants`` computed away."""

SMALL = 1 << 16
"""Elements a folded constant may hold whatever it depends on (a mask, a position table)."""

_UNINITIALIZED = frozenset({
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default, torch.ops.aten.empty_like.default,
    torch.ops.aten.new_empty.default, torch.ops.aten.new_empty_strided.default,
})
_KEPT_NAMESPACES = frozenset({"trtcheck", "tensorrt"})  # quantize ops: explicit Q/DQ stays in the graph
_ATEN = torch.ops.aten
_CHEAP = frozenset({
    operator.getitem, _ATEN.view.default, _ATEN._unsafe_view.default, _ATEN.reshape.default, _ATEN.permute.default,
    _ATEN.t.default, _ATEN.transpose.int, _ATEN.expand.default, _ATEN.unsqueeze.default, _ATEN.squeeze.dim,
    _ATEN.squeeze.dims, _ATEN.squeeze.default, _ATEN.slice.Tensor, _ATEN.select.int, _ATEN.alias.default,
    _ATEN.detach.default, _ATEN.clone.default, _ATEN.lift_fresh_copy.default, _ATEN._to_copy.default,
})
"""Views, copies and casts: no work an engine would be spared, so never a reason to fold."""


@dataclass(frozen=True)
class FoldPlan:
    """``computed``: the nodes to run when folding, in graph order; ``kept``: those whose values replace them (read
    by a node that is not folded, or by the output)."""

    computed: tuple[torch.fx.Node, ...]
    kept: tuple[torch.fx.Node, ...]

    def __bool__(self) -> bool:
        return bool(self.kept)


def _static_tensors(value: Any) -> bool:
    values = value if isinstance(value, (tuple, list)) else [value]
    return bool(values) and all(
        isinstance(v, torch.Tensor) and all(isinstance(d, int) for d in v.shape) for v in values
    )


def _foldable_op(node: torch.fx.Node, keep: Callable[[Any], bool] | None) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target in _UNINITIALIZED or (keep is not None and keep(target)):
        return False
    if target.namespace in _KEPT_NAMESPACES or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return not node.is_impure() and not target._schema.is_mutable and _static_tensors(node.meta.get("val"))


def propose_folding(gm: torch.fx.GraphModule, small: int = SMALL, keep: Callable[[Any], bool] | None = None) -> FoldPlan:
    """Which nodes of ``gm``'s graph (not its branches') depend only on constants, and which of them to keep as
    constants: those read by a node that is not folded, that compute something from a weight (not only a view,
    transpose or cast of it, which would store a second copy of the weight for no work saved: Linear's transposed
    weight), within ``_fits``' size; a value too large backs off to the values it is computed from, and the nodes
    between stay in the graph. An op ``keep`` matches (``torch_executed_ops``) is never folded: the user named it to
    run in PyTorch, and the partition must find it. Pure: the graph is read, never changed."""
    size: dict[torch.fx.Node, int] = {}  # constant node -> elements of the weights it depends on (an upper bound)
    weighted: set[torch.fx.Node] = set()  # constant nodes that read a weight
    computes: set[torch.fx.Node] = set()  # constant nodes with more than views and casts of weights behind them
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            weight = constant_tensor(node)
            if weight is not None and not is_mutable_state(node):
                size[node] = weight.numel()
                weighted.add(node)
        elif _foldable_op(node, keep) and all(arg in size for arg in node.all_input_nodes):
            size[node] = sum(size[arg] for arg in node.all_input_nodes)
            if any(arg in weighted for arg in node.all_input_nodes):
                weighted.add(node)
            if node.target not in _CHEAP or any(arg in computes for arg in node.all_input_nodes):
                computes.add(node)
    computed = [n for n in size if n.op == "call_function"]
    folded = set(computed)
    worth = weighted & computes
    stack = [node for node in computed if node in worth and any(user not in folded for user in node.users)]
    chosen: set[torch.fx.Node] = set()
    seen: set[torch.fx.Node] = set()
    while stack:  # a value too large to keep backs off to the constants it is computed from
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if _fits(node, size[node], small):
            chosen.add(node)
        else:
            stack.extend(arg for arg in node.all_input_nodes if arg in worth)
    if not chosen:
        return FoldPlan((), ())
    needed = _ancestors(chosen, folded)
    return FoldPlan(tuple(n for n in computed if n in needed), tuple(n for n in computed if n in chosen))


def _fits(node: torch.fx.Node, weights: int, small: int) -> bool:
    """A single tensor (a buffer holds one) no larger than the weights it comes from, or ``small``."""
    value = node.meta["val"]
    return isinstance(value, torch.Tensor) and value.numel() <= max(weights, small)


def _ancestors(nodes: Iterable[torch.fx.Node], within: set[torch.fx.Node]) -> set[torch.fx.Node]:
    found: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(arg for arg in node.all_input_nodes if arg in within)
    return found


def fold_constants(gm: torch.fx.GraphModule, plan: FoldPlan | None = None, keep: Callable[[Any], bool] | None = None) -> int:
    """Run ``plan``'s nodes (``propose_folding(gm, keep=keep)`` when None), make each kept value a buffer of ``gm`` read
    by a ``get_attr`` that takes the node's metadata (its value, source line and module path), and erase what no node
    reads any more; ``gm.meta[FOLDED]`` records the ops folded away (a lowering reused for settings that force one of
    them is not reused: ``export.keeps``). Returns how many values became constants. Called by lowering on the graph
    it has just made."""
    plan = propose_folding(gm, keep=keep) if plan is None else plan
    gm.meta[FOLDED] = frozenset(n.target for n in plan.computed if isinstance(n.target, torch._ops.OpOverload))
    if not plan:
        return 0
    values: dict[torch.fx.Node, Any] = {}
    computed, kept = set(plan.computed), set(plan.kept)
    remaining = {node: sum(1 for user in node.users if user in computed) for node in plan.computed}
    with torch.no_grad():
        for node in plan.computed:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                 lambda arg: constant_tensor(arg) if arg.op == "get_attr" else values[arg])
            values[node] = node.target(*args, **kwargs)
            for arg in node.all_input_nodes:  # free what no folded node still reads
                if arg in remaining:
                    remaining[arg] -= 1
                    if remaining[arg] == 0 and arg not in kept:
                        values.pop(arg, None)
    for index, node in enumerate(plan.kept):
        name = f"_folded_{index}_{node.name}"
        gm.register_buffer(name, values[node].detach().clone(), persistent=True)  # a tensor: ``_fits``
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant, delete_user_cb=lambda user: user not in computed)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return len(plan.kept)
