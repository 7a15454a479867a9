"""``search_quantizers``: the fewest quantizers to leave unquantized for a quantized model to stay within a loss.

The precision search's sibling for explicit quantization (``trtcheck precision MODEL --quant --max-loss X``): where
``fp32_search`` finds the nodes to keep in float32 for fp16 to verify, this finds the ModelOpt quantizers to disable
for the quantized model's outputs to stay within ``max_loss`` of the float model, on every input set tried. The loss
is the one ``verify`` reports (``quantizers.quantization_loss``: the lowered graph in float64, a quantizer left out
being one that passes its input through, as a disabled ModelOpt quantizer exports no node). Quantizers are added in
the order of what leaving each out saves, then each is dropped again where the rest still holds (one-minimal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import flat_inputs
from trtcheck.provenance import module_stack
from trtcheck.verification.inputs import draw_input_sets
from trtcheck.verification.quantizers import quantization_loss, quantized_graph, relative_error


@dataclass
class QuantizerSearch:
    """What ``search_quantizers`` found: ``left_out`` the quantizers to disable (module paths, as ModelOpt names them),
    ``loss`` the model's loss with every quantizer on and ``loss_left_out`` with those off (None: no set reached
    ``max_loss``, not even every quantizer off, which only a model whose float graph does not run in float64 has)."""

    name: str
    max_loss: float
    loss: float
    left_out: list[str] = field(default_factory=list)
    loss_left_out: float | None = None
    input_sets: int = 1
    why: str = ""  # why nothing was found where it is not the bound (the graph does not run in float64)

    @property
    def found(self) -> bool:
        return self.loss_left_out is not None

    def __str__(self) -> str:
        head = (f"trtcheck quantizer search of {self.name}: quantization costs {self.loss:.3g} of the outputs' scale "
                f"(worst of {self.input_sets} input sets, against the float model in float64); bound --max-loss {self.max_loss:g}")
        if not self.found:
            return head + f"\n  {self.why or 'no set of quantizers to leave out keeps the outputs within it'}"
        if not self.left_out:
            return head + "\n  within the bound with every quantizer on: nothing to leave out"
        names = ", ".join(repr(path) for path in self.left_out)  # whole names: a '*' would match other layers' too
        return "\n".join([
            head,
            f"  leave {len(self.left_out)} quantizer(s) unquantized: {', '.join(self.left_out)} (loss then {self.loss_left_out:.3g})",
            f"  with ModelOpt: for name in [{names}]: mtq.disable_quantizer(model, name)",
        ])


def _path(node: torch.fx.Node) -> str:
    stack = module_stack(node)
    return stack[-1][0] if stack else node.name


def search_quantizers(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    max_loss: float,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    num_inputs: int = 3,
    seed: int = 0,
    name: str | None = None,
) -> QuantizerSearch:
    """The fewest quantizers of ``model`` (ModelOpt-quantized) to leave unquantized for its outputs to stay within
    ``max_loss`` of the float model, relative to their scale, on the example and ``num_inputs - 1`` random input sets
    drawn as ``verify`` draws them (module docstring)."""
    if not (isinstance(max_loss, (int, float)) and max_loss >= 0):
        raise ValueError(f"max_loss={max_loss!r}: the largest loss against the float model, relative to the outputs' scale, >= 0")
    kwargs = dict(example_kwargs or {})
    gm = lower(model, tuple(example_inputs), kwargs)
    graph = quantized_graph(gm)
    if graph is None:
        return QuantizerSearch(name or type(model).__name__, float(max_loss), math.inf, why=(
            "its quantizers cannot be left out one by one in float64 (a control-flow branch holds some, or the graph "
            "does not cast to float64)"))
    sets = draw_input_sets(tuple(example_inputs), None, num_inputs, seed)
    flats = [flat_inputs(gm, s, kwargs) for s in [sets[0], *sets[2:]]]  # the example once
    everyone = set(graph.index)
    exact = [graph.outputs(flat, everyone) for flat in flats]

    def loss(left_out: set[str]) -> float:
        """The worst loss over the input sets with ``left_out`` unquantized (inf where a run fails)."""
        runs = [(graph.outputs(flat, left_out), reference) for flat, reference in zip(flats, exact)]
        return max(math.inf if out is None or reference is None else relative_error(out, reference) for out, reference in runs)

    label = name or type(model).__name__
    found = QuantizerSearch(label, float(max_loss), loss(set()), input_sets=len(flats))
    if math.isinf(found.loss):
        found.why = "the quantized graph or its float model does not run in float64, so no loss can be measured"
        return found
    if found.loss <= max_loss:
        found.loss_left_out = found.loss
        return found
    costs = quantization_loss(gm, flats[0])
    order = [cost.node for cost in costs.ranked] if costs is not None else []
    order += [node.name for node in graph.quantizers if node.name not in order]  # the unranked, in graph order
    chosen: list[str] = []
    for node in order:
        chosen.append(node)
        if loss(set(chosen)) <= max_loss:
            break
    else:
        return found
    for node in list(reversed(chosen)):  # one-minimal: drop whatever the others make unnecessary
        if len(chosen) > 1 and loss(set(chosen) - {node}) <= max_loss:
            chosen.remove(node)
    by_name = {node.name: node for node in graph.quantizers}
    found.left_out = [_path(by_name[node]) for node in chosen]
    found.loss_left_out = loss(set(chosen))
    return found


__all__ = ["QuantizerSearch", "search_quantizers"]
