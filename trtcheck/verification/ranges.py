"""Which nodes leave fp16's (or bf16's) range, and the pattern that takes them there.

A reduced-precision engine fails for a reason a user can act on only when it names the node: LayerNorm's variance
overflowing in fp16 (NVIDIA/TensorRT #2564, #3101), a softmax whose mask constant becomes ``-inf`` and then NaN
(transformers #17306), an ``exp`` or ``pow`` of large values, a long sum. ``range_findings`` reads eager's own
activations (``recording.record_eager``: every node's float32 value on one input set) and names every node whose
values are above the format's largest finite value, or nonzero but small enough to round to zero, with the pattern.
Two checks look inside a node, where the value that overflows is never an activation: a normalization
(``native_layer_norm``, ``native_group_norm``, ``var``) whose input's squared deviations reach the range (the
variance TensorRT accumulates in fp16), and a softmax whose input holds values below the range's negative end (a
mask constant that becomes ``-inf``; a row of them is NaN).

A finding whose inputs are all in range is an *origin*: the place to keep in float32 (``Settings.fp32_nodes``).
The nodes fed by an overflow inherit it and are listed after the origins, so the first lines are the ones to act on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from trtcheck.dtypes import PRECISION_DTYPES
from trtcheck.lowering.graph import constant_tensor, flat_inputs, past_range_constant
from trtcheck.text import plural
from trtcheck.values import cloned
from trtcheck.verification.judge import Verdict
from trtcheck.verification.recording import record_eager

aten = torch.ops.aten

_NORMALIZATIONS = {aten.native_layer_norm.default, aten.native_group_norm.default, aten.var.correction,
                   aten.var_mean.correction, aten.var.dim}
_SOFTMAXES = {aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default}
_REDUCTIONS = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default, aten.cumsum.default,
               aten.prod.default, aten.prod.dim_int}
_PRODUCTS = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.convolution.default, aten.matmul.default,
             aten.baddbmm.default, aten.linear.default}
_POWERS = {aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar}
_EXPONENTIALS = {aten.exp.default, aten.exp2.default, aten.expm1.default, aten.sinh.default, aten.cosh.default}
LONG_SUM = 256
"""A reduction over at least this many elements is named "a long sum" (fp16 keeps 11 bits: a running sum of
256 values of one size has already lost three of them)."""


@dataclass(frozen=True)
class RangeFinding:
    """One node whose values leave the format's range: ``kind`` "overflow" (above its largest finite value, or
    a normalization's squares or a softmax's mask past it) or "underflow" (nonzero values that round to zero)."""

    node: str
    op: str
    kind: str
    count: int
    total: int
    extreme: float  # overflow: the largest magnitude; underflow: the smallest nonzero magnitude
    pattern: str
    origin: bool  # no input of this node left the range: the place to keep in float32
    keep: tuple[str, ...] = ()  # a constant it reads is past the range (clamped in the engine's graph): what keeps it

    @property
    def clamped(self) -> bool:
        """It computes with a constant past the range, which the reduced-precision graph clamps."""
        return bool(self.keep)

    @property
    def fp32_nodes(self) -> list[str]:
        """What to keep in float32 for it: the node, and for a clamped constant the nodes it comes through too."""
        return list(self.keep) or [self.node]

    def __str__(self) -> str:
        where = "origin" if self.origin else "inherited"
        return (f"{self.node} ({self.op}): {self.count} of {self.total} values {self.kind} ({self.pattern}; "
                f"extreme {self.extreme:.3g}) [{where}]")


def range_findings(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any], precision: str) -> list[RangeFinding]:
    """Every node of ``gm`` whose recorded value (``values``: ``record_eager``) leaves ``precision``'s range
    ("fp16" or "bf16"), origins first, then by how many values left it."""
    finfo = torch.finfo(PRECISION_DTYPES[precision])
    largest, smallest = finfo.max, finfo.smallest_normal * finfo.eps / 2  # below half the least subnormal: zero
    found: list[RangeFinding] = []
    overflowed: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or constant_tensor(node) is not None:  # a constant passed on: its reader's finding
            continue
        inputs = [arg for arg in node.all_input_nodes if arg in overflowed]
        constant = past_range_constant(node, largest)
        inner = _inner_overflow(node, values, largest)
        value = _first_float(values.get(node))
        if value is None and inner is None and constant is None:
            continue
        big = value.isfinite() & (value.abs() > largest) if value is not None else None
        if inner is not None or (big is not None and bool(big.any())):
            count, total, extreme, pattern = inner or (
                int(big.sum()), value.numel(), float(value.abs()[value.isfinite()].max()), _pattern(node, values, largest))
            overflowed.add(node)
            found.append(RangeFinding(node.name, str(node.target), "overflow", count, total, extreme, pattern, not inputs,
                                      keep=tuple(constant[1]) if constant is not None and not inputs else ()))
            continue
        if constant is not None and not inputs:  # in range itself, but computed with a constant the low graph clamps
            number, keep = constant
            found.append(RangeFinding(node.name, str(node.target), "overflow", 1, 1, abs(number), (
                f"a constant {number:g} past the range: the {precision} graph holds it as {math.copysign(largest, number):g} "
                "(clamped), so this node computes something else; keep it in float32"), True, keep=tuple(keep)))
            overflowed.add(node)
            continue
        if inputs:
            overflowed.add(node)  # inf flowing through: not a finding of its own
        tiny = (value != 0) & (value.abs() < smallest) & value.isfinite() if value is not None else None
        if tiny is not None and bool(tiny.any()):
            extreme = float(value.abs()[tiny].min())
            found.append(RangeFinding(node.name, str(node.target), "underflow", int(tiny.sum()), value.numel(), extreme,
                                      f"rounds to zero in {precision}{_underflow_hint(node)}", True))
    return sorted(found, key=lambda f: (f.kind != "overflow", not f.origin, -f.count))


def compiled_range_findings(
    compiled: Any, example_inputs: Sequence[Any], kwargs: Mapping[str, Any], precision: str
) -> tuple[list[RangeFinding], str]:
    """``range_findings`` of a compiled module's lowered graph on eager's values on the example inputs (the given
    values are not changed), and ``""``; or no findings and a note saying why they could not be found: naming the
    nodes explains a failure, and must never replace it."""
    gm = compiled.partition.graph_module
    try:
        values = record_eager(gm, flat_inputs(gm, cloned(tuple(example_inputs)), cloned(dict(kwargs))))
        return range_findings(gm, values, precision), ""
    except Exception as error:  # noqa: BLE001 - a diagnostic
        return [], f"the nodes leaving {precision}'s range could not be found: {type(error).__name__}: {error}"


def clamped_outputs(gm: torch.fx.GraphModule, comparisons: Sequence[Any], findings: Sequence[RangeFinding],
                    precision: str) -> None:
    """Each failing output of ``comparisons`` judged a conversion error that a clamped constant (``findings``' with
    ``clamped``) reaches in ``gm``: the precision's range instead (``Verdict.CLAMPED``), naming the node to keep in
    float32. A constant past fp16's range is clamped by the fp16 graph itself, so the engine computes another function
    than eager in fp16 (which keeps a scalar in float32): no converter is wrong. ``comparisons`` are changed."""
    clamped = {finding.node: finding for finding in findings if finding.clamped}
    if not clamped:
        return
    by_name = {node.name: node for node in gm.graph.nodes}
    downstream: dict[torch.fx.Node, str] = {}
    for name in clamped:
        stack = [by_name[name]] if name in by_name else []
        while stack:
            node = stack.pop()
            if node not in downstream:
                downstream[node] = name
                stack.extend(node.users)
    # the lowered graph returns the model's outputs flattened, in the order a comparison lists them
    leaves = pytree.tree_leaves(gm.graph.output_node().args[0])
    for comparison in comparisons:
        if len(comparison.outputs) != len(leaves):
            continue
        for output, leaf in zip(comparison.outputs, leaves):
            node = downstream.get(leaf) if isinstance(leaf, torch.fx.Node) else None
            if node is None or output.passed or output.verdict is not Verdict.CONVERSION:
                continue
            output.verdict = Verdict.CLAMPED
            output.message = (f"{output.message.split(' (more than')[0]}: {node} reads {clamped[node].pattern.split(':')[0]} "
                              f"that the {precision} graph clamps, so this is {precision}'s range, not a converter "
                              f"(keep it in float32: Settings.fp32_nodes={clamped[node].fp32_nodes!r})")


def fp32_fix(gm: torch.fx.GraphModule, findings: Sequence[RangeFinding]) -> list[str]:
    """The nodes to keep in float32 so that no value past the range is ever held in the low type: each overflow
    origin (with what a clamped constant comes through), every node that inherits an overflow, and each node reading
    an overflowing value, in graph order. Keeping the origin alone was not enough: its float32 result is cast back
    down for a low reader (an overflowing sum of squares read by ``sqrt``: inf again)."""
    overflowing = {f.node for f in findings if f.kind == "overflow"}
    chosen = {name for f in findings if f.kind == "overflow" and f.origin for name in f.fp32_nodes} | overflowing
    for node in gm.graph.nodes:
        if node.name in overflowing:
            chosen.update(user.name for user in node.users if user.op == "call_function")
    return [node.name for node in gm.graph.nodes if node.name in chosen]


def describe_findings(findings: list[RangeFinding], precision: str, limit: int = 12, fix: Sequence[str] = (),
                      holds: bool | None = None) -> list[str]:
    """The findings as report lines: a heading, then overflows (origins first), then underflows, at most ``limit``, and
    the setting that keeps them in float32: ``fix`` (``fp32_fix``; the overflow origins where none is given), said to
    verify or not as ``holds`` says (None: not checked)."""
    if not findings:
        return []
    overflows = sum(f.kind == "overflow" for f in findings)
    lines = [f"{precision} range (eager's float32 activations on the example): {plural(overflows, 'node')} overflow, "
             f"{plural(len(findings) - overflows, 'node')} underflow"]
    lines += [f"  {finding}" for finding in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"  ... and {len(findings) - limit} more")
    keep = list(fix) or [name for f in findings if f.kind == "overflow" and f.origin for name in f.fp32_nodes]
    search = f"`trtcheck precision MODEL --precision {precision}`"
    if keep:
        checked = {True: "checked: verify passes with it", False: f"checked: verify still fails with it; search: {search}",
                   None: f"or search: {search}"}[holds]
        lines.append(f"  keep in float32: Settings(precision={precision!r}, fp32_nodes={keep!r}) ({checked})")
    return lines


def _first_float(value: Any) -> torch.Tensor | None:
    """A node's value as one floating tensor (the first of a tuple: ``native_layer_norm``'s output)."""
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
        return value.detach()
    return None


def _inner_overflow(node: torch.fx.Node, values: dict[torch.fx.Node, Any], largest: float) -> tuple[int, int, float, str] | None:
    """An overflow inside ``node`` no activation shows: a normalization's squared deviations, a softmax's mask."""
    if node.target in _NORMALIZATIONS and node.args:
        x = _first_float(values.get(node.args[0]))
        if x is None:
            return None
        squares = (x.double() - x.double().mean()) ** 2
        big = squares > largest
        if bool(big.any()):
            what = "LayerNorm variance" if node.target is aten.native_layer_norm.default else "variance"
            return (int(big.sum()), x.numel(), float(squares.max()),
                    f"{what}: its input's squared deviations reach {float(squares.max()):.3g}, past the range, where "
                    "an fp16 kernel accumulates them")
    if node.target in _SOFTMAXES and node.args:
        x = _first_float(values.get(node.args[0]))
        if x is None:
            return None
        masked = x.isfinite() & (x < -largest)
        if bool(masked.any()):
            return (int(masked.sum()), x.numel(), float(x.min().abs()),
                    f"softmax with a large negative mask: {float(x.min()):.3g} becomes -inf (a row of it: NaN); use "
                    "torch.finfo(dtype).min of the engine's precision, or keep it in float32")
    return None


def _pattern(node: torch.fx.Node, values: dict[torch.fx.Node, Any], largest: float = math.inf) -> str:
    target = node.target
    constants = [arg for arg in node.args if isinstance(arg, (int, float)) and not isinstance(arg, bool) and abs(arg) > largest]
    if constants:
        return (f"a constant {constants[0]:g} past the range (a mask value? torch.finfo(dtype).min of the engine's "
                "precision stays in it)")
    if target in _EXPONENTIALS:
        return "exp of large values"
    if target in _POWERS or (target in (aten.mul.Tensor,) and len(node.args) == 2 and node.args[0] is node.args[1]):
        return "pow: a square or power of large values"
    if target in _REDUCTIONS:
        reduced = _reduced_count(node, values)
        return f"a long sum over {reduced} values" if reduced >= LONG_SUM else f"a sum over {reduced} values"
    if target in _PRODUCTS:
        return "a matmul or convolution summing products past the range"
    return "values past the range"


def _reduced_count(node: torch.fx.Node, values: dict[torch.fx.Node, Any]) -> int:
    """How many values a reduction sums into each of its outputs (0 when either value is unknown)."""
    source = _first_float(values.get(node.args[0])) if node.args else None
    out = _first_float(values.get(node))
    return source.numel() // max(out.numel(), 1) if source is not None and out is not None else 0


def _underflow_hint(node: torch.fx.Node) -> str:
    if node.target in _EXPONENTIALS:
        return " (exp of very negative values: harmless unless divided by or logged later)"
    return ""


SUSPECT_MAGNITUDE = 512.0
"""A node whose values reach this magnitude is a suspect for fp32 (``suspects``): fp16's spacing there is 0.5."""
_SUSPECT_OPS = _NORMALIZATIONS | _SOFTMAXES | _POWERS | _EXPONENTIALS


def suspects(gm: torch.fx.GraphModule, values: dict[torch.fx.Node, Any]) -> list[str]:
    """The usual suspects for float32, in graph order: normalizations, softmaxes, powers, exps, long sums, and nodes
    whose values reach ``SUSPECT_MAGNITUDE`` (what ``trtcheck precision`` tries after the named overflows)."""
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        value = _first_float(values.get(node))
        large = value is not None and bool((value.abs()[value.isfinite()] >= SUSPECT_MAGNITUDE).any())
        long_sum = node.target in _REDUCTIONS and _reduced_count(node, values) >= LONG_SUM
        if node.target in _SUSPECT_OPS or long_sum or large:
            found.append(node.name)
    return found
