"""The judge: whether a compiled output's distance from eager is acceptable, one rule chosen once per request.

``equivalence`` says how far an output is (``compare_outputs``: statistics against eager, the tolerances' verdict);
the judge says whether that is acceptable when the tolerances alone cannot tell rounding from a wrong conversion.
As Polygraphy's comparator picks its compare function once and passes it on, ``Judge.of(settings, rtol, atol,
reference)`` is made once per request and handed to everything that judges an output: verify's input sets and
varied scalar inputs, localization's segments, sub-engines and its culprit's diagnosis, reduction, the precision
search and the benchmarks' verdict. One value, one rule (``Judge.rule``), so that two of them cannot disagree on
the same numbers.

The rule, on an output's ``Distance`` (its largest finite error against eager run in float64, and the yardstick's):

- float32 (``precision`` "fp32"): an output within the tolerances passes; outside them it passes when it is at most
  ``REFERENCE_MULTIPLE`` times as far from float64 as eager in the model's dtype, plus a tenth of its atol, with
  eager's NaN and Inf (a deep network's rounding passes, a conversion error does not), as ``torch._dynamo``'s
  accuracy check does.
- fp16/bf16 (``Settings.precision``): every output, its yardstick eager run at that precision:
  ``REDUCED_PRECISION_MULTIPLE`` times eager's error plus the precision's floor, NaN and Inf only where float64 has
  them, and within ``rounding_bound(precision, depth)`` times the output's scale (eager at that precision is no
  yardstick for a model that does not work there).
- tf32 (``Settings.tf32``): as fp16 (TF32 rounds factors to fp16's mantissa), but with float32's range: its NaN and
  Inf are those of eager under TF32.
- quantized (a graph with Q/DQ, ``for_graph``): as float32, against the quantized graph itself run in float64 with
  TensorRT's quantization arithmetic (``trtcheck.qdq``), and allowing besides ``FLIP_MULTIPLE`` times how far the
  outputs move when, at every quantizer, the code nearest a rounding tie flips one step (``Distance.flips``): an
  engine's float32 arithmetic may land such an input on the other side, and one flipped INT8 code moves a conv's
  outputs by thousands of float32 ulps. A wrong quantizer shows in its codes too (``verification.quantizers``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from trtcheck import qdq
from trtcheck.engines.precision import unit_roundoff
from trtcheck.lowering.graph import constant_tensor, flat_inputs
from trtcheck.lowering.quantized import is_quantize, quantizer_call
from trtcheck.verification.equivalence import Comparison, OutputComparison, compare_outputs, default_tolerances, render_path
from trtcheck.verification.inputs import detached
from trtcheck.verification.reference import Float64Model, float64_outputs, float64_outputs_and_depth, reduced_precision_outputs

if TYPE_CHECKING:
    from trtcheck.partitioning.partition import Partition
    from trtcheck.settings import Settings

REFERENCE_MULTIPLE = 3.0
"""How much further from float64 than eager a float32 output may be (``torch._dynamo``'s accuracy check uses 2 to 3).
Calibrated by ``python -m suites.benchmarks.calibrate_reference``: docs/performance.md, "The float64 reference"."""

REDUCED_PRECISION_MULTIPLE = 4.0
"""How much further from float64 than eager *at the same precision* an fp16/bf16/tf32 output may be. Larger than
``REFERENCE_MULTIPLE``: the engine rounds after every ONNX node of the decomposed graph, where eager rounds after each
PyTorch op and keeps some fused ones in float32 inside (docs/precision.md, "Measured")."""

REDUCED_PRECISION_FLOOR = {"fp16": 1e-4, "bf16": 1e-3, "tf32": 1e-4}
"""The absolute error against float64 any output may have at that precision (a tenth of the dtype's default atol): an
output eager computes exactly still rounds once in the engine. TF32 rounds factors to fp16's mantissa: fp16's."""

ROUNDING_BOUND_CAP = 0.5
"""The most any depth excuses, relative to the output's scale: an output off by half its scale is not rounded."""

FLIP_MULTIPLE = 2.0
"""How many times the outputs' move from one flipped tie per quantizer a quantized model's output may err by."""

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
"""What a judge can judge at (``judged_precision``'s names)."""


def rounding_bound(precision: str, depth: int | None) -> float:
    """The largest error against float64, relative to the output's scale, that ``depth`` roundings at ``precision``
    may leave: ``2 * depth * u`` (``u``: ``unit_roundoff``; Higham's worst case ``depth * u`` of a chain of roundings,
    doubled for an engine that rounds its inputs and outputs too), at most ``ROUNDING_BOUND_CAP``; the cap alone for
    ``depth`` None (not counted)."""
    if depth is None:
        return ROUNDING_BOUND_CAP
    return min(ROUNDING_BOUND_CAP, 2 * max(int(depth), 1) * unit_roundoff(precision))


class Verdict(enum.Enum):
    """What the judge found of one output beyond the tolerances; only ``AS_EAGER`` passes."""

    AS_EAGER = "as close to float64 as eager"
    BEYOND_DEPTH = "the precision's rounding or range: eager at that precision errs as much, beyond its depth's bound"
    NONFINITE = "inf or NaN where float64 is finite: the precision's range"
    NOT_EAGERS_NONFINITE = "its NaN/Inf are not eager's"
    CONVERSION = "further from float64 than eager: a conversion error"
    CLAMPED = "a constant past the precision's range, clamped in the engine's graph: the precision's range"

    @property
    def passed(self) -> bool:
        return self is Verdict.AS_EAGER

    @property
    def precision_cause(self) -> bool:
        """The precision, not the converter, explains it: eager is as far, or the format's range is left."""
        return self in (Verdict.AS_EAGER, Verdict.BEYOND_DEPTH, Verdict.NONFINITE, Verdict.CLAMPED)



def judged_precision(settings: Settings | None) -> str:
    """The precision ``verify`` must judge a module compiled with ``settings`` by: ``"fp16"``/``"bf16"`` for a reduced
    ``Settings.precision`` (its float32 nodes are the minority the judge's yardstick, eager in that dtype, does not
    model either), else ``"tf32"`` when ``Settings.tf32`` (every float32 matmul and convolution rounds its inputs),
    else ``"fp32"`` (also for None: the defaults)."""
    if settings is None:
        return "fp32"
    precision = settings.precision or "fp32"
    if precision != "fp32":
        return precision
    return "tf32" if settings.tf32 else "fp32"

@dataclass(frozen=True)
class Distance:
    """One output's distance from float64, what the rule weighs: ``compiled`` and ``eager`` are the largest finite
    errors of the compiled output and of the yardstick (eager in the model's dtype, or at the judged precision);
    ``scale`` the output's largest finite float64 magnitude; ``atol`` its tolerance; ``depth`` the roundings on the
    way to it (None: not counted); ``same_nonfinite``: its NaN and Inf are the reference's (float64's at fp16/bf16,
    the yardstick's otherwise); ``overflowed``/``shared``: elements inf or NaN where float64 is finite, and how many
    of them the yardstick has too."""

    compiled: float
    eager: float
    scale: float = 0.0
    atol: float = 0.0
    depth: int | None = None
    same_nonfinite: bool = True
    overflowed: int = 0
    shared: int = 0
    flips: float = 0.0  # a quantized graph's: how far its float64 outputs move when each quantizer flips its nearest tie

    @property
    def ratio(self) -> float:
        """Compiled error over eager's (0 when both are 0)."""
        if self.eager == 0:
            return 0.0 if self.compiled == 0 else math.inf
        return self.compiled / self.eager


@dataclass(frozen=True)
class Judge:
    """The rule a request judges every output by (module docstring), chosen once: ``precision`` is what the engines
    compute in ("fp32", "tf32", "fp16", "bf16"); ``rtol``/``atol`` the request's tolerances (None: the output dtype's
    defaults); ``reference`` False: the tolerances alone decide, no float64 is run."""

    precision: str = "fp32"
    rtol: float | None = None
    atol: float | None = None
    reference: bool = True
    graph: torch.fx.GraphModule | None = field(default=None, compare=False, repr=False)
    """A quantized model's lowered graph (``for_graph``): its float64 run is the reference; None for every other."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"a judge judges at one of {', '.join(PRECISIONS)}, got {self.precision!r}")

    @classmethod
    def of(cls, settings: Settings | None = None, rtol: float | None = None, atol: float | None = None, reference: bool = True) -> Judge:
        """The judge of a module compiled with ``settings`` (``judged_precision``: "tf32" for ``Settings.tf32``)."""
        return cls(judged_precision(settings), rtol, atol, reference)

    @classmethod
    def of_partition(cls, partition: Partition, rtol: float | None = None, atol: float | None = None) -> Judge:
        """The judge of a module compiled as ``partition`` (a ``CompiledModule``'s): its settings' rule, the quantized
        one where its lowered graph holds quantizers."""
        return cls.of(partition.settings, rtol, atol).for_graph(partition.graph_module)

    def for_graph(self, graph: torch.fx.GraphModule) -> Judge:
        """This judge for a module compiled from ``graph``: the quantized rule where ``graph`` holds quantizers and
        the engines compute in float32 (module docstring), else this judge."""
        if self.precision != "fp32" or not any(is_quantize(node) for node in graph.graph.nodes):
            return self
        return replace(self, graph=graph)

    @property
    def quantized(self) -> bool:
        return self.graph is not None

    # ---------------------------------------------------------------------------------------- what the rule is

    @property
    def reduced(self) -> bool:
        """Below float32 (or TF32): every output is judged against float64, those within the tolerances too."""
        return self.precision != "fp32"

    @property
    def multiple(self) -> float:
        return REDUCED_PRECISION_MULTIPLE if self.reduced else REFERENCE_MULTIPLE

    def floor(self, atol: float) -> float:
        """The absolute error against float64 any output may have beyond the yardstick's multiple."""
        return REDUCED_PRECISION_FLOOR[self.precision] if self.reduced else atol / 10

    @property
    def yardstick(self) -> str:
        """What the compiled output is held to, in words: "eager", or "eager in fp16"."""
        return f"eager in {self.precision}" if self.reduced else "eager"

    @property
    def narrows_range(self) -> bool:
        """fp16/bf16 values have a narrower range than float32's (TF32 keeps float32's): nodes can leave it."""
        return self.precision in ("fp16", "bf16")

    @property
    def nonfinite_from_float64(self) -> bool:
        """Where the range narrows, an inf or NaN must be float64's own (an overflow eager in fp16 shares is still the
        model's range problem, which ``fp32_nodes`` fixes); in float32's range (float32, TF32): eager's."""
        return self.narrows_range

    def allowed(self, distance: Distance) -> float:
        return self.multiple * distance.eager + FLIP_MULTIPLE * distance.flips + self.floor(distance.atol)

    def bound(self, distance: Distance) -> float:
        """The largest error against float64 the precision's rounding allows over the depth (inf at float32)."""
        if not self.reduced:
            return math.inf
        return rounding_bound(self.precision, distance.depth) * distance.scale + self.floor(distance.atol)

    def rule(self, distance: Distance) -> Verdict:
        """THE rule: one output's verdict beyond the tolerances."""
        if not distance.same_nonfinite:
            return Verdict.NONFINITE if self.nonfinite_from_float64 else Verdict.NOT_EAGERS_NONFINITE
        if distance.compiled > self.allowed(distance):
            return Verdict.CONVERSION
        if distance.compiled > self.bound(distance):
            return Verdict.BEYOND_DEPTH
        return Verdict.AS_EAGER

    def fix(self) -> str:
        """What to change when the precision, not the conversion, ruins an output."""
        if self.precision == "tf32":
            return "build without TF32 (Settings(tf32=False)): its matmul and convolution factors keep 10 mantissa bits"
        return "keep the nodes that cause it in float32 (Settings.fp32_nodes; `trtcheck precision` searches for them)"

    @property
    def missing_reference(self) -> str:
        """What is missing when the rule cannot be applied, in words."""
        return f"no float64 or {self.precision} eager reference" if self.reduced else "no float64 reference"

    def explain(self, distance: Distance | None, node: str) -> str:
        """The diagnosis of one op (``node``) from the same rule and distance its verdict comes from: rounding or the
        precision's range (and the fix), or a wrong converter."""
        if distance is None:
            return f"{self.missing_reference} for this op: the tolerances alone decide"
        verdict, ratio = self.rule(distance), f"{distance.ratio:.3g}"
        if verdict.precision_cause and self.reduced:
            return (f"{self.yardstick} is as far from float64 as the engine built in {self.precision}: eager "
                    f"{distance.eager:.3g}, the engine {distance.compiled:.3g} ({ratio}x): {self.precision}'s rounding or "
                    f"range on these inputs, not the converter; keep {node!r} in float32, with what its value reaches "
                    "(the report's 'keep in float32' line is a set verify was run with)")
        if verdict.precision_cause:
            return (f"this op is ill-conditioned on these inputs: eager is {distance.eager:.3g} from float64, the "
                    f"engine {distance.compiled:.3g} ({ratio}x), so no converter can do better in this dtype")
        built = f", built in {self.precision}," if self.reduced else ""
        return (f"this op's converter is wrong: the engine{built} is {distance.compiled:.3g} from float64, {ratio}x "
                f"{self.yardstick}'s own {distance.eager:.3g}")

    # ---------------------------------------------------------------------------------------- judging outputs

    def compare(self, expected: Any, actual: Any) -> Comparison:
        """The tolerances' comparison (``equivalence.compare_outputs``) at this judge's rtol and atol."""
        return compare_outputs(expected, actual, rtol=self.rtol, atol=self.atol)

    def judge_outputs(self, comparison: Comparison, yardstick: Any, actual: Any, reference: Any, depth: int | None = None,
                      flipped: Any = None) -> Comparison:
        """Judge the outputs of ``comparison`` against ``reference`` (eager in float64, same structure), ``yardstick``
        (eager in the model's dtype, or at this judge's precision) their measure. Below float32 every output is
        judged and gets its ratio; at float32 only those that failed the tolerances. ``comparison`` is changed in place
        (the verdict, the errors, the message saying which rule held) and returned."""
        if comparison.structure_error is not None:
            return comparison
        references, yardsticks, actuals, flips = (
            {render_path(path): value for path, value in pytree.tree_flatten_with_path(tree)[0]}
            for tree in (reference, yardstick, actual, flipped)
        )
        for output in comparison.outputs:
            if output.passed and not self.reduced:
                continue
            compiled = actuals.get(output.path)
            if not isinstance(compiled, torch.Tensor) or compiled.dtype != output.dtype:
                continue
            distance = self.distance(references.get(output.path), yardsticks.get(output.path), compiled, output.atol, depth)
            if distance is None:
                continue
            moved = flips.get(output.path)
            if isinstance(moved, torch.Tensor) and moved.shape == compiled.shape:
                exact = references[output.path].detach().to(torch.float64).reshape(-1)
                distance = replace(distance, flips=_largest_error(moved.reshape(-1), exact))
            output.distance, output.eager_precision = distance, self.precision if self.reduced else ""
            if not output.passed:
                self._conclude(output, distance)
        comparison.passed = all(output.passed for output in comparison.outputs)
        return comparison

    def distance(self, exact: Any, eager: Any, compiled: Any, atol: float, depth: int | None = None) -> Distance | None:
        """The ``Distance`` of one output (None where the three values are not floating Tensors of one shape):
        ``exact`` is float64's value, ``eager`` the yardstick's, ``atol`` the output's tolerance."""
        if not all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in (exact, eager, compiled)):
            return None
        if exact.shape != compiled.shape or eager.shape != compiled.shape:
            return None
        exact = exact.detach().to(torch.float64).reshape(-1)
        eager = eager.detach().to(exact.device, torch.float64).reshape(-1)
        compiled = compiled.detach().to(exact.device, torch.float64).reshape(-1)
        finite = eager.isfinite() & compiled.isfinite()
        nonfinite_reference = exact if self.nonfinite_from_float64 else eager
        overflowed = compiled.isfinite().logical_not() & exact.isfinite()
        return Distance(
            compiled=_largest_error(compiled[finite], exact[finite]),
            eager=_largest_error(eager[finite], exact[finite]),
            scale=_max(exact[exact.isfinite()].abs()),
            atol=atol,
            depth=depth,
            same_nonfinite=_same_nonfinite(nonfinite_reference, compiled),
            overflowed=int(overflowed.sum()),
            shared=int((overflowed & eager.isfinite().logical_not()).sum()),
        )

    def _conclude(self, output: OutputComparison, distance: Distance) -> None:
        """An output outside the tolerances: its verdict and the message saying which rule held."""
        verdict = self.rule(distance)
        output.verdict = verdict
        ratio = f"{distance.ratio:.3g}"
        if verdict.passed:
            output.passed = True
            output.message = (
                f"outside the tolerances, but as close to float64 as {self.yardstick}: max error against float64 "
                f"{distance.compiled:.3g} against {self.yardstick}'s {distance.eager:.3g} (ratio {ratio} "
                f"<= {self.multiple:g}, floor {self.floor(distance.atol):.3g}"
                + (f", and {FLIP_MULTIPLE:g}x the {distance.flips:.3g} one flipped tie per quantizer moves it)" if distance.flips
                   else ")"))
        elif verdict is Verdict.BEYOND_DEPTH:
            depth = "not counted" if distance.depth is None else f"{distance.depth} ops"
            relative = distance.compiled / distance.scale if distance.scale else math.inf
            output.message += (
                f"; against float64 it errs by {distance.compiled:.3g}, {relative:.3g} relative to the output's scale "
                f"{distance.scale:.3g}, more than the {rounding_bound(self.precision, distance.depth):.3g} that "
                f"{self.precision}'s unit roundoff allows over the model's depth ({depth}): the model does not compute "
                f"this output in {self.precision}, {self.yardstick} errs by {distance.eager:.3g} too (an overflow, "
                f"underflow or cancellation inside); {self.fix()}")
        elif verdict is Verdict.NONFINITE:
            output.message += (
                f"; {distance.overflowed} element(s) are inf or NaN where float64 is finite ({distance.shared} of them in "
                f"{self.yardstick} too): {self.precision}'s range or rounding takes them there, not only the conversion; "
                f"{self.fix()}")
        elif verdict is Verdict.NOT_EAGERS_NONFINITE:
            output.message += f"; its NaN/Inf are not those of {self.yardstick}"
        else:
            flips = f" + {FLIP_MULTIPLE:g}x {distance.flips:.3g}, one flipped tie per quantizer," if distance.flips else ""
            output.message += (
                f"; against float64 the compiled output errs by {distance.compiled:.3g}, {ratio}x {self.yardstick}'s own "
                f"{distance.eager:.3g} (more than {self.multiple:g}x{flips} + {self.floor(distance.atol):.3g}: a "
                f"conversion error, not {(self.precision + ' ') if self.reduced else ''}rounding)")

    def judge_call(
        self,
        comparison: Comparison,
        model: torch.nn.Module,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        expected: Any,
        actual: Any,
        state: Mapping[str, torch.Tensor] | None = None,
    ) -> str:
        """Judge ``comparison`` (eager's outputs ``expected`` of ``model`` on ``args``/``kwargs`` against the compiled
        module's, ``actual``) beyond the tolerances: the references are run here (float64, and below float32 eager at
        the judged precision), on a copy of the model from ``state`` (a ``snapshot_state``: the state eager started
        the call from). ``comparison`` is changed in place and ``""`` returned; where a reference cannot run, nothing
        is judged (the tolerances' verdict stands) and the reason is returned for the report's notes."""
        if not self.reference or (comparison.passed and not self.reduced):  # the common case pays for no float64
            return ""
        if self.quantized:  # the user's model: its lowered graph, on the flat inputs, is the quantized reference
            return self._judge_quantized(comparison, self.graph, tuple(flat_inputs(self.graph, args, kwargs)), expected, actual)
        exact, why, depth = float64_outputs_and_depth(model, args, kwargs, state)
        if exact is None:
            return f"{self.missing_reference} ({why})"
        if not self.reduced:
            self.judge_outputs(comparison, expected, actual, exact)
            return ""
        low, why = reduced_precision_outputs(model, args, kwargs, self.precision, state)
        if low is None:
            return f"{self.missing_reference} ({why})"
        self.judge_outputs(comparison, detached(low), actual, exact, depth)
        return ""

    def _judge_quantized(self, comparison: Comparison, graph: torch.fx.GraphModule, inputs: tuple, expected: Any, actual: Any,
                         *, own_outputs: bool = False) -> str:
        """Judge ``comparison`` by the quantized rule: the reference is ``graph`` (quantized) in float64 on ``inputs``,
        and how far its outputs move when each quantizer flips its nearest tie is allowed besides (module docstring).
        ``own_outputs``: ``graph`` is what the engine stands for (a segment, a sub-engine), so an output a quantizer
        makes is also judged in its steps (``_judge_quantizer_outputs``)."""
        try:
            wide = Float64Model(graph, reused=True)  # cast once, run twice
        except Exception as error:  # noqa: BLE001 - a graph that cannot be copied or cast has no reference
            return f"{self.missing_reference} (the graph could not be copied to float64: {type(error).__name__}: {error})"
        exact, why, depth = wide.run(inputs, {})
        flipped, _, _ = wide.run(inputs, {}, flip_ties=True)
        if exact is None:
            return f"{self.missing_reference} ({why})"
        self.judge_outputs(comparison, expected, actual, exact, depth, flipped=flipped)
        if own_outputs:
            _judge_quantizer_outputs(comparison, graph, expected, actual)
        return ""

    @property
    def judges_every_output(self) -> bool:
        """Below float32 every output is held to float64, those within the tolerances too; at float32 the tolerances
        pass an output, and only one outside them is judged again."""
        return self.reduced

    def atol_of(self, value: torch.Tensor) -> float:
        """The atol an output of ``value``'s dtype is held to (the request's, else the dtype's default)."""
        return default_tolerances(value.dtype)[1] if self.atol is None else self.atol

    def judge_engine(
        self, module: torch.fx.GraphModule, inputs: Sequence[Any], expected: Sequence[Any], actual: Sequence[Any], *,
        first_failure: bool = False,
    ) -> tuple[Comparison, str]:
        """An engine standing for ``module`` (a standalone graph: a segment, a sub-engine's nodes) run on ``inputs``:
        its outputs ``actual`` against eager's ``expected``, judged as ``judge_call`` judges a model's, and why a
        reference could not run ("" when judged). At float32 the outputs are judged one by one, cheaply
        (``judge_values``: a sub-engine has an output per node), stopping at the first failure with ``first_failure``."""
        if self.judges_every_output:
            comparison = self.compare(list(expected), list(actual))
            return comparison, self.judge_call(comparison, module, tuple(inputs), {}, list(expected), list(actual))
        if self.quantized and any(is_quantize(node) for node in module.graph.nodes):  # a piece without one: float32's rule
            comparison = self.compare(list(expected), list(actual))
            if comparison.passed or not self.reference:
                return comparison, ""
            return comparison, self._judge_quantized(comparison, module, tuple(inputs), list(expected), list(actual),
                                                     own_outputs=True)
        exact = (lambda: float64_outputs(module, tuple(inputs), {})[0]) if self.reference else None
        return self.judge_values(expected, actual, exact, first_failure=first_failure), ""

    def distances(
        self, module: torch.fx.GraphModule, inputs: Sequence[Any], expected: Sequence[Any], actual: Sequence[Any],
    ) -> list[Distance | None]:
        """Each output's ``Distance`` for an engine standing for ``module`` run on ``inputs`` (``actual``; eager's
        ``expected``): float64 and this judge's yardstick run here, as ``judge_call`` runs them (None where they
        cannot run, or the output is not a floating Tensor)."""
        exact, _, depth = float64_outputs_and_depth(module, tuple(inputs), {})
        yardstick = list(expected)
        if exact is not None and self.reduced:
            low, _ = reduced_precision_outputs(module, tuple(inputs), {}, self.precision)
            yardstick = None if low is None else list(detached(low))
        if exact is None or yardstick is None:
            return [None] * len(actual)
        return [self.distance(x, y, a, self.atol_of(a), depth) if isinstance(a, torch.Tensor) else None
                for x, y, a in zip(exact, yardstick, actual)]

    @property
    def engines_note(self) -> str:
        """How engines built below float32 are judged, for a report that checks engines one by one ("" at float32)."""
        if not self.reduced:
            return ""
        rounding = "with TF32 (matmul and convolution inputs rounded to 10 mantissa bits)" if self.precision == "tf32" else (
            f"in {self.precision} (with the compiled fp32_nodes, use_fp32_acc and autocast)")
        return (f"the engines run {rounding}, and so were this localization's sub-engines built; each segment and "
                f"sub-engine is judged as verify judges {self.precision}: against float64, {self.yardstick} its yardstick, "
                f"within {self.precision}'s rounding over its depth. The accumulated errors are measured by the tolerances "
                "alone")

    def judge_values(
        self, expected: Sequence[Any], actual: Sequence[Any], exact: Callable[[], Any] | None, *, first_failure: bool = False,
    ) -> Comparison:
        """Many float32 outputs at once, as a sub-engine has them (one per node): each within the tolerances, or,
        ``exact`` a thunk of the float64 outputs run once and only when some output needs it, accepted by the rule.
        An output within the tolerances gets no statistics (hundreds of activations would cost more than building
        the engine). ``first_failure``: stop at the first failing output; every output downstream of a wrong op
        fails too, and only the first one is news."""
        outputs: list[OutputComparison] = []
        reference: list[Any] | None = None
        for index, (e, a) in enumerate(zip(expected, actual)):
            path = f"out[{index}]"
            if self._quickly_close(e, a):
                outputs.append(OutputComparison(path, tuple(e.shape), e.dtype, self.rtol or 0.0, self.atol or 0.0, True))
                continue
            if exact is not None and reference is None:
                reference = list(exact() or [None] * len(expected))
            if reference is not None and self._quickly_accepted(e, a, reference[index]):
                outputs.append(OutputComparison(path, tuple(e.shape), e.dtype, self.rtol or 0.0, self.atol or 0.0, True))
                continue
            comparison = self.compare(e, a)
            if not comparison.passed and reference is not None and reference[index] is not None:
                self.judge_outputs(comparison, e, a, reference[index])
            output = comparison.outputs[0] if comparison.outputs else OutputComparison(path, (), None, 0.0, 0.0, False)
            output.passed = output.passed and comparison.structure_error is None
            output.path = path
            outputs.append(output)
            if first_failure and not output.passed:
                break
        return Comparison(outputs, all(output.passed for output in outputs))

    def _quickly_accepted(self, expected: Any, actual: Any, exact: Any) -> bool:
        """The rule's pass alone, no statistics: finite everywhere and accepted (float32 outputs only)."""
        if not all(isinstance(v, torch.Tensor) for v in (expected, actual, exact)) or not expected.is_floating_point():
            return False
        if not (expected.shape == actual.shape == exact.shape) or expected.numel() == 0:
            return False
        exact = exact.to(torch.float64)
        eager_error = float((expected.to(torch.float64) - exact).abs().max())
        error = float((actual.to(expected.device, torch.float64) - exact).abs().max())
        if not (math.isfinite(error) and math.isfinite(eager_error)):
            return False
        return self.rule(Distance(error, eager_error, atol=self.atol_of(expected))).passed

    def _quickly_close(self, expected: Any, actual: Any) -> bool:
        """``compare_outputs``'s pass rule alone (``torch.isclose`` at the tolerances), no statistics."""
        if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
            return False
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            return False
        default_rtol, default_atol = default_tolerances(expected.dtype)
        rtol = default_rtol if self.rtol is None else self.rtol
        atol = default_atol if self.atol is None else self.atol
        actual = actual.to(expected.device)
        if expected.numel() == 0:
            return True
        if expected.is_floating_point():  # isclose is slow on the CPU: its rule without its NaN handling, where no NaN
            error = (actual - expected).abs_()
            largest = float(error.max())
            if largest <= atol:
                return True
            if math.isfinite(largest):  # a failure here is a failure; an element on the edge is judged again in full
                return bool((error <= expected.abs().mul_(rtol).add_(atol)).all())
        return bool(torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def _judge_quantizer_outputs(comparison: Comparison, module: torch.fx.GraphModule, expected: Any, actual: Any) -> None:
    """An output a quantizer makes itself (a segment's or a sub-engine's) is judged in that quantizer's steps against
    eager's on the same input (``qdq.agree``): at the quantizer, one flipped tie moves a value a whole step, as much as
    a scale a few percent off moves every value, so only the codes tell them apart. Outputs are matched by their path
    in the module's output structure, as the comparison names them."""
    if comparison.structure_error is not None:
        return
    nodes, wanted, got = (
        {render_path(path): value for path, value in pytree.tree_flatten_with_path(tree)[0]}
        for tree in (module.graph.output_node().args[0], expected, actual)
    )
    for output in comparison.outputs:
        node, value, engine = nodes.get(output.path), wanted.get(output.path), got.get(output.path)
        call = quantizer_call(node) if isinstance(node, torch.fx.Node) else None
        if call is None or not isinstance(engine, torch.Tensor):
            continue
        fmt, amax = call.fmt, constant_tensor(call.amax)
        if fmt is None or amax is None or not isinstance(value, torch.Tensor) or engine.shape != value.shape:
            continue
        steps = qdq.steps_apart(engine, value, amax, fmt)
        if not qdq.agree(steps):
            why = (f"a quantizer's own output: {int((steps > qdq.APART).sum())} of {steps.numel()} values are off TensorRT's "
                   f"arithmetic on the same input, by up to {float(steps.max()):.3g} step(s), more than ties at one step: a "
                   "conversion error")
            # an output the distance rule passed (one flipped tie may move a value as far) says only why it fails
            output.message = why if output.passed else f"{output.message}; {why}"
            output.passed, output.verdict = False, Verdict.CONVERSION
    comparison.passed = all(output.passed for output in comparison.outputs)


def _same_nonfinite(reference: torch.Tensor, value: torch.Tensor) -> bool:
    """``value`` is inf or NaN exactly where ``reference`` is, with the same infinities (float64, flat)."""
    finite = reference.isfinite() & value.isfinite()
    if not bool(torch.equal(reference[~finite].nan_to_num(0.0), value[~finite].nan_to_num(0.0))):
        return False
    return bool((reference.isnan() == value.isnan()).all())


def _largest_error(value: torch.Tensor, exact: torch.Tensor) -> float:
    """The largest ``|value - exact|`` where both are finite (in float64)."""
    value = value.to(torch.float64).reshape(-1)
    finite = value.isfinite() & exact.isfinite()
    return _max((value - exact).abs()[finite])


def _max(values: torch.Tensor) -> float:
    return float(values.max()) if values.numel() else 0.0
