"""Which nodes must stay in float32 for a model to verify in fp16 or bf16: ``trtcheck precision MODEL``.

Users of reduced precision lose days finding the layers to keep in float32 (NVIDIA/TensorRT #4662, Torch-TensorRT
#3947). ``search_fp32_nodes`` finds a small set by testing sets, each trial a whole ``verify`` at that precision with
``Settings.fp32_nodes`` set (the model is lowered once; every trial partitions and converts a copy):

1. none: the model may verify as it is;
2. the overflow origins eager's activations name (``ranges.range_findings``), then those and the usual suspects
   (``ranges.suspects``: normalizations, softmaxes, powers, exps, long sums, values past 512), then every node the
   engines run: the first set that verifies is kept (none verifying: the mismatch is not one of precision, and the
   search says so; a control-flow branch's nodes are among them, named by their path, ``false_graph_0/mul_1``);
3. that set shrunk by removing chunks, as delta debugging does (halves, then quarters, ... down to single nodes),
   keeping each removal after which ``verify`` still passes, until no chunk can go or the budget is spent. The
   result is 1-minimal when the budget allows: no single node of it can be dropped;
4. the result verified with the random input sets of ``CONFIRM_SEEDS`` more seeds: a seed it fails on joins every
   later trial and the search runs again, so the set printed holds on every seed it was tried with.

What it measures besides: the stitched module's time per call at float32, at ``precision`` and at ``precision`` with
the set found. On ONNX Runtime that time is the emulation's (Cast pairs after every node), not TensorRT's: only its
ratio on TensorRT says what the float32 layers cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trtcheck.compiler.pipeline import compile
from trtcheck.errors import SettingsError, VerificationError
from trtcheck.lowering.export import lower, source_of
from trtcheck.lowering.graph import flat_inputs
from trtcheck.names import checked_settings, in_branch
from trtcheck.partitioning.reasons import Target
from trtcheck.runtime.profiling import profile
from trtcheck.settings import Settings
from trtcheck.text import plural
from trtcheck.verification.inputs import cloned
from trtcheck.verification.probes import Budget
from trtcheck.verification.ranges import RangeFinding, describe_findings, range_findings, suspects
from trtcheck.verification.recording import record_eager
from trtcheck.verification.verify import verify

TIMED_CALLS = 20
CONFIRM_SEEDS = 3
"""Seeds after ``seed`` whose random input sets a found set must verify on too (``search_fp32_nodes``)."""


@dataclass
class Fp32Search:
    """What ``search_fp32_nodes`` found: ``fp32_nodes`` ([] when the model verifies as it is, None when no set did)."""

    name: str
    precision: str
    fp32_nodes: list[str] | None
    trials: list[tuple[list[str], bool]] = field(default_factory=list)
    seconds: float = 0.0
    complete: bool = True  # False: the budget ran out while shrinking (the set verifies, it may not be minimal)
    findings: list[RangeFinding] = field(default_factory=list)
    milliseconds: dict[str, float] = field(default_factory=dict)  # per call: "fp32", precision, precision + fp32_nodes
    seeds: list[int] = field(default_factory=list)  # seeds whose random input sets the result verified on

    def __str__(self) -> str:
        on = f", on the input sets of seeds {', '.join(map(str, self.seeds))}" if len(self.seeds) > 1 else ""
        tried = f"{plural(len(self.trials), 'trial')} of verify in {self.seconds:.1f} s{on}"
        if self.fp32_nodes is None:
            head = (f"trtcheck precision {self.name}: no set of nodes in float32 makes it verify in {self.precision} "
                    f"({tried}): even with every engine node in float32 it fails, so the mismatch is not one of precision")
        elif not self.fp32_nodes:
            head = f"trtcheck precision {self.name}: verifies in {self.precision} with no node in float32 ({tried})"
        else:
            minimal = "" if self.complete else " (the budget ran out while shrinking it: it may not be minimal)"
            head = (f"trtcheck precision {self.name}: verifies in {self.precision} with "
                    f"{plural(len(self.fp32_nodes), 'node')} in float32{minimal} ({tried}):\n"
                    f"  Settings(precision={self.precision!r}, fp32_nodes={self.fp32_nodes!r})")
        lines = [head]
        lines += [f"  {line}" for line in describe_findings(self.findings, self.precision)[:1]]
        if self.milliseconds:
            timed = ", ".join(f"{label} {ms:.3g} ms" for label, ms in self.milliseconds.items())
            lines.append(f"  time per call (median of {TIMED_CALLS}): {timed}")
        return "\n".join(lines)


def search_fp32_nodes(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    precision: str = "fp16",
    settings: Settings | None = None,
    backend: str = "auto",
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    inputs: Sequence[Any] | None = None,
    num_inputs: int = 3,
    seed: int = 0,
    budget: float = 300.0,
    name: str | None = None,
    timed: bool = True,
    confirm_seeds: int = CONFIRM_SEEDS,
) -> Fp32Search:
    """A small set of nodes to keep in float32 so that ``verify`` passes at ``precision`` (module docstring), on the
    input sets of ``seed`` and of the ``confirm_seeds`` seeds after it."""
    if precision not in ("fp16", "bf16"):
        raise SettingsError(f"trtcheck precision searches fp16 or bf16, got {precision!r}: fp32 keeps every node in float32")
    base = dataclasses.replace(checked_settings(settings), precision=precision, fp32_nodes=[])
    source = source_of(model, example_inputs, example_kwargs)
    args, kwargs = source.example_args, source.example_kwargs or {}
    lowered = lower(source.lowerable, args, kwargs)
    clock = Budget(budget)
    result = Fp32Search(name or type(source.lowerable).__name__, precision, None)
    engine_nodes: list[str] = []

    seeds = [seed]  # every trial verifies with these: ``seed``, then each confirming seed a result failed on

    def verifies(nodes: Sequence[str], with_seed: int) -> bool:
        try:
            report = verify(source.eager, args, dataclasses.replace(base, fp32_nodes=list(nodes)), backend,
                            num_inputs=num_inputs, inputs=inputs, example_kwargs=kwargs, lowered=lowered, seed=with_seed,
                            localize_budget=0, name=result.name)
            passed = True
        except VerificationError as failure:
            report, passed = failure.report, False
        if not engine_nodes:  # control-flow branches' too, by the path trtcheck prints (``false_graph_0/mul_1``)
            engine_nodes.extend(in_branch(path, node.name) for path, part in report.partition.walk() for segment in part.segments
                                if segment.target is Target.TENSORRT for node in segment.nodes if node.op == "call_function")
        return passed

    def trial(nodes: Sequence[str]) -> bool:
        chosen = sorted(set(nodes))
        passed = all(verifies(chosen, each) for each in seeds)
        result.trials.append((chosen, passed))
        return passed

    def search() -> tuple[list[str] | None, bool]:
        if trial([]):
            return [], True
        values = record_eager(lowered, flat_inputs(lowered, cloned(tuple(args)), cloned(dict(kwargs))))
        result.findings = range_findings(lowered, values, precision)
        in_engines = set(engine_nodes)
        origins = [f.node for f in result.findings if f.kind == "overflow" and f.origin and f.node in in_engines]
        named = origins + [f.node for f in result.findings if f.kind == "overflow" and f.node in in_engines]
        usual = named + [node for node in suspects(lowered, values) if node in in_engines]
        tried = [t for t, _ in result.trials]
        for candidates in (origins, named, usual, engine_nodes):
            candidates = list(dict.fromkeys(candidates))
            if candidates and sorted(candidates) not in tried and trial(candidates):
                return _shrink(candidates, trial, clock)
        return None, True

    result.fp32_nodes, result.complete = search()
    # A set found on one seed's input sets may fail on another's (a sum that overflows float16 on some sets only):
    # each confirming seed is verified, and one that fails joins those every trial verifies with, and the search
    # runs again. Inputs given by the caller are the same for every seed: nothing to confirm.
    pending = list(range(seed + 1, seed + 1 + (confirm_seeds if inputs is None else 0)))
    confirmed, index = list(seeds), 0
    while index < len(pending) and result.fp32_nodes is not None:
        extra = pending[index]
        index += 1
        if extra in seeds:
            continue
        if verifies(sorted(result.fp32_nodes), extra):
            confirmed.append(extra)
            continue
        result.trials.append((sorted(result.fp32_nodes), False))
        seeds.append(extra)  # every later trial verifies with it too; the new result is confirmed from the start
        result.fp32_nodes, result.complete = search()
        confirmed, index = list(seeds), 0
    result.seeds = sorted(confirmed)
    result.seconds = clock.elapsed
    if timed and result.fp32_nodes:
        settings_by_label = {"fp32": dataclasses.replace(base, precision="fp32"), precision: base,
                             f"{precision} + fp32_nodes": dataclasses.replace(base, fp32_nodes=result.fp32_nodes)}
        result.milliseconds = {label: _milliseconds(source.lowerable, args, kwargs, chosen, backend, lowered)
                               for label, chosen in settings_by_label.items()}
    return result


def _shrink(nodes: list[str], passes: Any, clock: Budget) -> tuple[list[str], bool]:
    """``nodes`` (a set that passes) with chunks removed while it still passes, halves first, then ever smaller
    chunks (delta debugging's complement step); True when it ended 1-minimal rather than when ``clock`` was spent."""
    current, chunks = list(nodes), 2
    while len(current) > 1:
        size = math.ceil(len(current) / chunks)
        for start in range(0, len(current), size):
            if clock.spent:
                return current, False
            candidate = current[:start] + current[start + size:]
            if passes(candidate):
                current, chunks = candidate, max(chunks - 1, 2)
                break
        else:
            if size == 1:
                return current, True
            chunks = min(len(current), chunks * 2)
    return current, True


def _milliseconds(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any], settings: Settings, backend: str,
                  lowered: torch.fx.GraphModule) -> float:
    """The compiled module's median time per call in ms (``runtime.profiling.profile``: ``TIMED_CALLS`` calls)."""
    stitched = compile(model, args, settings, backend, example_kwargs=kwargs, lowered=lowered)
    return profile(stitched, *cloned(tuple(args)), repeat=TIMED_CALLS, kwargs=cloned(dict(kwargs))).total_s * 1e3
