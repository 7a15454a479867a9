"""Many engines sharing the machine: eager vs stitched (one engine, many segments), per ONNX Runtime option.

    python -m suites.benchmarks.bench_segments [--models resnet18 mobilenet_v3_small] [--repeat 3] [--rounds 40]
                                               [--options] [--omp-passive] [--keep-denormals] [--ort-runs 20]

Per model, from one run: median latency of eager PyTorch, of the stitched module with default settings
(one engine) and of the stitched module with min_block_size 1 and ``aten::relu`` + ``aten::hardswish``
forced to PyTorch (many segments); the many/eager ratio (target <= 1) and the overhead per boundary from
``trtcheck.profile`` (target < 30 us), each with the engines ``trtcheck.compile`` built ("default": the
options ``OnnxRuntimeEngine.build`` chooses), with the options engines had before issue 10 (per-session
pools that keep spinning after a run: "old"), and with the default options but every call bound through
``onnxruntime.IOBinding``'s Python wrapper instead of ONNX Runtime's pybind binding ("IOBinding wrapper":
how engines were called before; its effect shows in the crossings and us/boundary columns).

Where the time of the many-segment module goes, per option set: the profile's split (engines, Torch
segments, crossings), and ``alone``: the time inside the same engines when they run back to back on their
recorded inputs, with no PyTorch segment in between. ``engines - alone`` is what running between PyTorch
segments costs the engines; ``alone - 1 engine`` is what splitting costs inside ONNX Runtime (a layout
reorder in and out of every engine, fusions lost across a boundary, per-run overhead). Every row runs the
many-segment module with the PyTorch thread count ``compile(torch_threads="auto")`` chose for it (printed
with the model: 1 here, since its Torch segments are relus and hardswishes), except two diagnostic rows:
"torch_threads=None" runs the default engines with PyTorch on the caller's threads (as before issue 10's
fix: PyTorch's OpenMP worker then spins for about 10 ms after every Torch segment, on a core the next
engine's pool wants), and "same ops in PyTorch" runs every engine segment's ATen nodes in PyTorch instead
(eager kernels on the caller's threads, same partition and crossings): its ``engines`` column is eager's
time for exactly the ops the engines run. The last lines sum it up for the default: engine time against
boundary time (the crossings: trtcheck's Python per value crossing), and, from ONNX Runtime's own profiler
(``SessionOptions.enable_profiling``, ``--ort-runs`` runs of every engine back to back), how ONNX Runtime spends
the engines' time, many engines against one: kernels (what lost fusions cost), the CPU provider's NCHWc layout
reorders in and out of every engine, per-run overhead (executor, waking the intra-op pool) and the pybind call
with the binding's checks. That part is ONNX Runtime's, not trtcheck's (issue 42). The many-segment settings force
to PyTorch those of ``aten::relu`` and ``aten::hardswish`` the model calls (``many_settings``).

``--options`` compares more ONNX Runtime settings side by side (how ``OnnxRuntimeEngine``'s defaults were
chosen): spinning kept (old), spinning off (``allow_spinning=0``), spinning only while a run is in progress
(``force_spinning_stop=1``), bounded spinning (``spin_duration_us``), one intra-op thread, three (more
threads than cores), the NCHWc layout transformer off (``optimization.disable_specified_optimizers``),
``dynamic_block_base`` (blocks of a parallel loop shrinking as it ends: guided scheduling), and one global
thread pool shared by all sessions (``use_per_session_threads=False`` after
``onnxruntime.set_global_thread_pool_sizes``; a process with global pools cannot have per-session ones, so
that row comes from a child process, with its own eager time and ratios). ``--omp-passive`` adds a child
process run with ``OMP_WAIT_POLICY=PASSIVE`` (PyTorch's OpenMP workers sleep at once instead of spinning;
read at start-up, so it cannot be set from inside a process): a diagnosis of the engines-in-context cost,
not a setting trtcheck makes.

Timing: the variants are timed in interleaved rounds (each round times every variant ``--repeat`` times
and keeps the median, the variants in an order shuffled every round), and the median over ``--rounds``
rounds is printed, so that a change in machine load hits every variant alike. Each variant starts from a
quiet machine: ``OMP_SETTLE_S`` of sleep and one untimed call before its timed calls. Short rounds matter here:
rounds of 10-20 calls per variant in a fixed order gave differences of 10-20% between variants that
vanished when they alternated every few calls, and a call's time depends on what ran just before it
(PyTorch's OpenMP worker keeps spinning for about 10 ms after a parallel op: a variant that always ran
right after eager lost 6 ms against the same options elsewhere in the order). The rows whose idle threads
keep spinning ("old", the global pool) are timed apart, after the others. Denormals are flushed (see
bench_compile.py) unless ``--keep-denormals``.
A benchmark, not a test: it prints what it measured and asserts nothing.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import onnx
import onnxruntime as ort
import torch

import trtcheck
import trtcheck_zoo as models
from suites.benchmarks.bench_compile import median_seconds
from trtcheck.engines.onnxruntime import OnnxRuntimeEngine, default_threads, session_options
from trtcheck.names import resolve_ops
from trtcheck.partitioning.extract import segment_module
from trtcheck.runtime.profiling import Profiler
from trtcheck.runtime.stitch import EngineModule

MANY_OPS = ("aten::relu", "aten::hardswish")
"""The ops forced to PyTorch for the many-segment module, each where the model calls it (resnet18 has no hardswish)."""
DEFAULT = "default"
TORCH_OPS = "same ops in PyTorch"
CALLER_THREADS = "torch_threads=None"
WRAPPER = "IOBinding wrapper"
SETTLE_S = 0.2  # idle ONNX Runtime workers with spinning on spin for tens of ms after a run
OMP_SETTLE_S = 0.03  # PyTorch's OpenMP workers spin about 10 ms after a parallel region (libgomp's default)
APART = {"old: spin", "global pool"}  # option sets whose idle workers keep spinning after a call
APART_CALLS = 20  # calls of each of those (they are slow)


def old_options() -> ort.SessionOptions:
    """The session options engines had before issue 10: per-session pool, idle workers keep spinning."""
    return session_options(spin="always")


def with_entries(options: ort.SessionOptions, **entries: str) -> ort.SessionOptions:
    """``options`` with session config entries added."""
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return options


def per_kind(entries: dict[str, str]) -> dict[str, ort.SessionOptions]:
    """Options as ``OnnxRuntimeEngine.build`` chooses them for the sole engine and for one of many, plus the
    session config ``entries``."""
    return {"1 engine": with_entries(session_options(spin="stop_after_run"), **entries),
            "many": with_entries(session_options(spin="never"), **entries)}


def many_settings(model: torch.nn.Module, inputs: tuple, dynamic_shapes=None) -> tuple[trtcheck.Settings, torch.fx.GraphModule]:
    """min_block_size 1 and those of ``MANY_OPS`` the model calls forced to PyTorch (``trtcheck.compile`` refuses an
    op the model does not call: it would force nothing), and the model lowered keeping them whole (lowering would
    otherwise decompose hardswish), for ``compile(lowered=...)``."""
    keep = resolve_ops(MANY_OPS)
    kept = trtcheck.lower(model, inputs, dynamic_shapes=dynamic_shapes, keep=keep)
    unmatched = set(keep.unmatched([kept.graph]))
    return trtcheck.Settings(min_block_size=1, torch_executed_ops=[op for op in MANY_OPS if op not in unmatched]), kept


def option_sets(options: bool, global_pool: bool) -> dict[str, ort.SessionOptions | dict | None]:
    """Labels and session options: one for every engine, or one per kind (``per_kind``); ``None`` (the
    ``DEFAULT`` row) keeps the engines ``trtcheck.compile`` built."""
    if global_pool:  # this process configured ONNX Runtime's global pools: every session must use them
        shared = session_options(spin="always")  # global pools spin as configured in C; Python cannot change it
        shared.use_per_session_threads = False
        return {"global pool": shared}
    sets: dict[str, ort.SessionOptions | dict | None] = {DEFAULT: None, "old: spin": old_options(), WRAPPER: per_kind({})}
    if options:
        sets.update({
            "allow_spinning=0": session_options(spin="never"),
            "force_spinning_stop=1": session_options(spin="stop_after_run"),
            "spin_duration_us=20": with_entries(session_options(spin="always"), **{"session.intra_op.spin_duration_us": "20"}),
            "1 thread, no spin": session_options(threads=1, spin="never"),
            "3 threads, no spin": session_options(threads=3, spin="never"),
            "NCHWc off": per_kind({"optimization.disable_specified_optimizers": "NchwcTransformer"}),
            "dyn. block base 4": per_kind({"session.dynamic_block_base": "4"}),
            "dyn. block base 8": per_kind({"session.dynamic_block_base": "8"}),
        })
    return sets


class TorchSegment:
    """Stands in for an engine: runs the segment's ATen nodes in PyTorch (eager kernels), timed like an engine."""

    backend = "torch"

    def __init__(self, module: torch.fx.GraphModule, engine) -> None:
        self.module, self.inputs, self.outputs = module, engine.inputs, engine.outputs
        self.run_times: list[int] | None = None

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.run_times is None:
            return tuple(self.module(*tensors))
        start = time.perf_counter_ns()
        out = tuple(self.module(*tensors))
        self.run_times.append(time.perf_counter_ns() - start)
        return out


def engine_modules(compiled) -> list[EngineModule]:
    return [module for module in compiled.graph_module.children() if isinstance(module, EngineModule)]


def engines_with(compiled, options: ort.SessionOptions | None) -> dict[EngineModule, object]:
    """A new engine for every engine of ``compiled``, built with ``options`` (None: the engines it has)."""
    engines: dict[EngineModule, object] = {}
    for module in engine_modules(compiled):
        if options is None:
            engines[module] = module.engine
            continue
        model = onnx.load_from_string(compiled.conversion.onnx_models[module.segment_index])
        engines[module] = OnnxRuntimeEngine(model, module.engine.inputs, module.engine.outputs, options=options)
    return engines


def torch_segments(compiled) -> dict[EngineModule, TorchSegment]:
    """Every engine of ``compiled`` replaced by its segment's ATen nodes, run in PyTorch."""
    partition = compiled.partition
    return {module: TorchSegment(segment_module(partition.graph_module, partition.segments[module.segment_index]), module.engine)
            for module in engine_modules(compiled)}


def install(engines: dict[EngineModule, object]) -> None:
    for module, engine in engines.items():
        module.engine = engine


def recorded_inputs(compiled, inputs) -> dict[EngineModule, tuple[torch.Tensor, ...]]:
    """The inputs every engine of ``compiled`` gets in one call (cloned)."""
    recorded = {}
    originals = {module: module.engine for module in engine_modules(compiled)}

    class Recorder:
        def __init__(self, module):
            self.module, self.engine = module, module.engine

        def __call__(self, *tensors):
            recorded[self.module] = tuple(t.clone() for t in tensors)
            return self.engine(*tensors)

    try:
        install({module: Recorder(module) for module in originals})
        with torch.inference_mode():
            compiled(*inputs)
    finally:
        install(originals)
    return recorded


def back_to_back(engines: dict[EngineModule, object], recorded) -> float:
    """Seconds inside the engines' runs (``run_times``) for one pass over all of them, nothing in between."""
    for engine in engines.values():
        engine.run_times = []
    try:
        for module, engine in engines.items():
            engine(*recorded[module])
        return sum(sum(engine.run_times) for engine in engines.values()) * 1e-9
    finally:
        for engine in engines.values():
            engine.run_times = None


@dataclass(frozen=True)
class OrtSplit:
    """One call's engines as ONNX Runtime's own profiler (``SessionOptions.enable_profiling``) splits them, seconds
    summed over the engines (medians over runs): ``wall`` inside ``run_with_iobinding``, of which ``session`` is
    ONNX Runtime's ``model_run`` event; ``kernels`` its node events but the NCHWc layout reorders (``reorders``);
    ``per_run`` = ``session - kernels - reorders``, what each run costs beyond its nodes (the executor, waking the
    intra-op pool); ``binding`` = ``wall - session``, the pybind call and the I/O binding's checks in C++."""

    engines: int
    wall: float
    session: float
    kernels: float
    reorders: float

    @property
    def per_run(self) -> float:
        return self.session - self.kernels - self.reorders

    @property
    def binding(self) -> float:
        return self.wall - self.session

    def __str__(self) -> str:
        n = self.engines
        return (f"{self.wall * 1e3:.2f} ms inside the runs of {n} engine{'s' * (n > 1)} = kernels {self.kernels * 1e3:.2f} "
                f"+ layout reorders {self.reorders * 1e3:.2f} + per-run overhead {self.per_run * 1e3:.2f} "
                f"({self.per_run / n * 1e6:.1f} us a run) + pybind/binding {self.binding * 1e3:.2f} "
                f"({self.binding / n * 1e6:.1f} us a run)")


REORDERS = {"ReorderInput", "ReorderOutput"}  # ONNX Runtime CPU's NCHWc transformer: into and out of its blocked layout


def ort_split(compiled, recorded, runs: int, spin: str) -> OrtSplit:
    """``compiled``'s engines rebuilt with ONNX Runtime's profiler on (``spin`` as ``OnnxRuntimeEngine.build`` sets it
    for that many engines), run back to back on ``recorded`` inputs ``runs`` times (after one untimed pass), split
    as ``OrtSplit`` says. The profiler adds its own time to every node; the split, not the total, is the point."""
    events: dict[str, list[list[float]]] = {key: [] for key in ("wall", "session", "kernels", "reorders")}
    with tempfile.TemporaryDirectory(prefix="bench-segments-ort-") as folder:
        for module in engine_modules(compiled):
            options = session_options(spin=spin)
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(folder, f"engine{module.segment_index}")
            model = onnx.load_from_string(compiled.conversion.onnx_models[module.segment_index])
            engine = OnnxRuntimeEngine(model, module.engine.inputs, module.engine.outputs, options=options)
            inputs = recorded[module]
            engine(*inputs)
            engine.run_times = []
            for _ in range(runs):
                engine(*inputs)
            with open(engine.session.end_profiling()) as file:
                trace = json.load(file)
            sessions = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("cat") == "Session" and e["name"] == "model_run")
            per_run = [{"kernels": 0.0, "reorders": 0.0} for _ in sessions]
            for event in trace:  # every node event to the run whose interval holds it
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    run = bisect.bisect_right(sessions, (event["ts"], math.inf)) - 1
                    key = "reorders" if event.get("args", {}).get("op_name") in REORDERS else "kernels"
                    per_run[run][key] += event["dur"]
            runs_us = [end - begin for begin, end in sessions][1:]  # the untimed run left out
            per_run = per_run[1:]
            events["wall"].append([ns * 1e-9 for ns in engine.run_times])
            events["session"].append([us * 1e-6 for us in runs_us])
            events["kernels"].append([r["kernels"] * 1e-6 for r in per_run])
            events["reorders"].append([r["reorders"] * 1e-6 for r in per_run])
    totals = {key: sum(statistics.median(values) for values in per_engine) for key, per_engine in events.items()}
    return OrtSplit(len(events["wall"]), **totals)


@dataclass
class Variant:
    """One thing timed: ``setup()`` (installing its engines, PyTorch's thread count) runs untimed before
    its calls; ``fn``'s wall time is measured, unless ``measures``: then ``fn`` returns its own seconds.
    ``settle_s``: sleep this long (then make one untimed call, ``warm`` or ``fn``) before its calls, so that
    the OpenMP workers the previous variant left spinning are asleep. ``apart``: its idle threads keep
    spinning after a call (the "old" options), which would slow whatever runs next: timed after the others."""

    setup: Callable[[], object]
    fn: Callable[[], object]
    measures: bool = False
    settle_s: float = 0.0
    warm: Callable[[], object] | None = None
    apart: bool = False

    def time(self, repeat: int) -> float:
        """Median seconds of ``repeat`` calls, after ``setup`` (and settling)."""
        self.setup()
        if self.settle_s:
            time.sleep(self.settle_s)
            (self.warm or self.fn)()
        if self.measures:
            return statistics.median(self.fn() for _ in range(repeat))
        return median_seconds(self.fn, repeat, warmup=0)


def interleaved(variants: dict[str, Variant], repeat: int, rounds: int, warmup: int = 3,
                warmed: Callable[[], object] | None = None) -> dict[str, float]:
    """Median over rounds of each variant's median over ``repeat`` calls; variants alternate every round,
    in an order shuffled every round (seeded), so that no variant always follows the same one: a call finds
    PyTorch's OpenMP workers spinning or not depending on what ran just before it. Variants ``apart``
    are timed afterwards, one after the other, ``SETTLE_S`` apart, ``APART_CALLS`` calls at most. ``warmed()`` is called once every
    variant has been warmed up (``warmup`` calls each).
    """
    for variant in variants.values():
        variant.setup()
        for _ in range(warmup):
            variant.fn()
    if warmed is not None:
        warmed()
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    together = [name for name, v in variants.items() if not v.apart]
    order = random.Random(0)
    for _ in range(rounds):
        order.shuffle(together)
        for name in together:
            per_round[name].append(variants[name].time(repeat))
    for name, variant in variants.items():
        if variant.apart:
            time.sleep(SETTLE_S)
            variant.settle_s = max(variant.settle_s, SETTLE_S)
            per_round[name] = [variant.time(min(repeat * rounds, APART_CALLS))]
            time.sleep(SETTLE_S)
    return {name: statistics.median(values) for name, values in per_round.items()}


def bench_model(name: str, option_sets_: dict[str, ort.SessionOptions | dict | None], repeat: int, rounds: int,
                ort_runs: int = 0) -> None:
    entry = models.get(name)
    model, inputs = entry.build()
    lowered = trtcheck.lower(model, inputs, dynamic_shapes=entry.dynamic_shapes)  # a dynamic entry's Dims kept
    single = trtcheck.compile(model, inputs, backend="onnxruntime", lowered=lowered)
    settings, kept = many_settings(model, inputs, entry.dynamic_shapes)
    many = trtcheck.compile(model, inputs, settings, backend="onnxruntime", lowered=kept)
    recorded = recorded_inputs(many, inputs)
    threads = torch.get_num_threads()
    # Engines for every option set, installed into the two compiled modules before each variant is timed.
    engines = {(kind, label): engines_with(compiled, options[kind] if isinstance(options, dict) else options)
               for label, options in option_sets_.items() for kind, compiled in (("1 engine", single), ("many", many))}
    for (_, label), built in engines.items():
        if label == WRAPPER:  # the default options, called through onnxruntime.IOBinding's Python wrapper
            for engine in built.values():
                engine._direct = None
    chosen = many.torch_threads  # what compile(torch_threads="auto") chose for the many-segment module
    torch_threads = {label: chosen for label in option_sets_}  # the many-segment module's, per row
    diagnose = DEFAULT in option_sets_  # not in the global-pool child: nothing there depends on the pools
    if diagnose:
        engines[("many", CALLER_THREADS)] = engines[("many", DEFAULT)]
        torch_threads[CALLER_THREADS] = None  # compile(torch_threads=None): PyTorch keeps the caller's threads
        engines[("many", TORCH_OPS)] = torch_segments(many)
        torch_threads[TORCH_OPS] = None  # eager kernels for the engines' ops, on the caller's threads

    def setup(label: str, built) -> Callable[[], None]:
        def install_and_set_threads() -> None:
            install(built)
            torch.set_num_threads(threads)
            many.torch_threads = torch_threads[label]
        return install_and_set_threads

    variants = {"eager": Variant(lambda: torch.set_num_threads(threads), lambda: model(*inputs), settle_s=OMP_SETTLE_S)}
    for (kind, label), built in engines.items():
        compiled = single if kind == "1 engine" else many
        variants[f"{kind} | {label}"] = Variant(setup(label, built), (lambda m: lambda: m(*inputs))(compiled),
                                                settle_s=OMP_SETTLE_S, apart=label in APART)
        if kind == "many" and label not in (TORCH_OPS, CALLER_THREADS):
            variants[f"alone | {label}"] = Variant(setup(label, built), (lambda b: lambda: back_to_back(b, recorded))(built),
                                                   measures=True, settle_s=OMP_SETTLE_S, apart=label in APART)
    labels = list(torch_threads)
    # Profiles are taken in the same interleaved rounds: each label's profiler keeps its runs, and the run
    # with the median total over all rounds is reported (Profiler.result).
    profilers = {}
    for label in labels:
        setup(label, engines[("many", label)])()
        profilers[label] = Profiler(many)  # reads the engines installed now (their run_times hooks)
        variants[f"profile | {label}"] = Variant(
            setup(label, engines[("many", label)]), (lambda p: lambda: p.run(*inputs))(profilers[label]),
            settle_s=OMP_SETTLE_S, warm=lambda: many(*inputs), apart=label in APART)
    try:
        with torch.inference_mode():
            times = interleaved(variants, repeat, rounds, warmed=lambda: [p.samples.clear() for p in profilers.values()])
            profiles = {label: profiler.result() for label, profiler in profilers.items()}
    finally:
        torch.set_num_threads(threads)
        many.torch_threads = chosen
        install(engines[("many", labels[0])])
    first = labels[0]
    eager = times["eager"]
    during = chosen if chosen is not None else f"{threads} (the caller's)"
    print(f"\n{name}: {len(many.partition.segments)} segments ({len(many.engines)} engines), "
          f"{profiles[first].boundaries} values crossing per call; PyTorch threads during a call "
          f"(torch_threads='auto'): {during}; eager {eager * 1e3:.2f} ms")
    print(f"  {'options':22s} {'1 engine ms':>11s} {'many ms':>8s} {'many/eager':>10s} {'1eng/eager':>10s} "
          f"| profile of many: {'total':>7s} {'engines':>7s} {'torch':>7s} {'bound.':>7s} {'us/bound.':>9s} | {'alone':>6s}")
    for label in labels:
        p = profiles[label]
        lots = times[f"many | {label}"]
        one, alone = times.get(f"1 engine | {label}"), times.get(f"alone | {label}")
        one_text = f"{one * 1e3:11.2f}" if one is not None else f"{'':11s}"
        one_ratio = f"{one / eager:10.2f}" if one is not None else f"{'':10s}"
        alone_text = f"{alone * 1e3:6.2f}" if alone is not None else f"{'':6s}"
        print(f"  {label:22s} {one_text} {lots * 1e3:8.2f} {lots / eager:10.2f} {one_ratio} "
              f"| {'':16s} {p.total_s * 1e3:7.2f} {p.engine_s * 1e3:7.2f} {p.torch_s * 1e3:7.2f} {p.boundary_s * 1e3:7.2f} "
              f"{p.per_boundary_s * 1e6:9.1f} | {alone_text}", flush=True)
    if diagnose:
        p, t, caller = profiles[first], profiles[TORCH_OPS], profiles[CALLER_THREADS]
        one, alone = times[f"1 engine | {first}"], times[f"alone | {first}"]
        print(f"  where the many-segment time goes ({first}): engines {p.engine_s * 1e3:.2f} ms in the stitched run = "
              f"{alone * 1e3:.2f} ms alone (one engine: {one * 1e3:.2f} ms: {(alone - one) * 1e3:+.2f} ms for splitting) "
              f"{(p.engine_s - alone) * 1e3:+.2f} ms for running between PyTorch segments ({caller.engine_s * 1e3:.2f} ms "
              f"when PyTorch keeps the caller's {threads} threads); the same ops in PyTorch: {t.engine_s * 1e3:.2f} ms; "
              f"Torch segments {p.torch_s * 1e3:.2f} ms, crossings {p.boundary_s * 1e3:.2f} ms", flush=True)
        print(f"  engine time against boundary time ({first}): engines {p.engine_s * 1e3:.2f} ms (ONNX Runtime's: "
              f"{(alone - one) * 1e3:+.2f} ms of it for splitting, inside ONNX Runtime's runs), boundaries "
              f"{p.boundary_s * 1e3:.2f} ms = {p.per_boundary_s * 1e6:.1f} us for each of {p.boundaries} values crossing "
              f"(trtcheck's Python: the engine call, input check, binding, output allocation, getitem/restride, "
              f"and the profile's marks)", flush=True)
    if ort_runs:  # ONNX Runtime's own profiler: where "alone - one engine" goes inside its runs
        with torch.inference_mode():
            lots = ort_split(many, recorded, ort_runs, spin="never")
            sole = ort_split(single, recorded_inputs(single, inputs), ort_runs, spin="stop_after_run")
        print(f"  ONNX Runtime's profiler, engines back to back ({ort_runs} runs, medians; the profiler's own time "
              f"inflates every node):\n    many: {lots}\n    one:  {sole}\n    splitting costs ONNX Runtime "
              f"{(lots.wall - sole.wall) * 1e3:+.2f} ms: kernels {(lots.kernels - sole.kernels) * 1e3:+.2f} (fusions lost, "
              f"smaller ops), layout reorders {(lots.reorders - sole.reorders) * 1e3:+.2f} (the CPU provider's NCHWc "
              f"layout, in and out of every engine), per-run overhead {(lots.per_run - sole.per_run) * 1e3:+.2f}, "
              f"pybind/binding {(lots.binding - sole.binding) * 1e3:+.2f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v3_small"])
    parser.add_argument("--repeat", type=int, default=3, help="calls per variant and round")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--options", action="store_true", help="compare more ONNX Runtime settings")
    parser.add_argument("--omp-passive", action="store_true",
                        help="also run the default rows in a child process with OMP_WAIT_POLICY=PASSIVE (diagnosis)")
    parser.add_argument("--global-pool", action="store_true", help=argparse.SUPPRESS)  # --options runs it in a child
    parser.add_argument("--keep-denormals", action="store_true")
    parser.add_argument("--ort-runs", type=int, default=20,
                        help="runs of every engine under ONNX Runtime's profiler for the split of its time (0: none)")
    args = parser.parse_args(argv)
    if args.global_pool:  # before any session exists: global pools are configured once per process
        ort.set_global_thread_pool_sizes(default_threads(), 1)
        ort.set_default_logger_severity(3)  # each session warns that its own pool sizes are ignored
    torch.set_flush_denormal(not args.keep_denormals)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    child = args.global_pool or os.environ.get("OMP_WAIT_POLICY")
    print(f"{'[child] ' if child else ''}torch threads: {torch.get_num_threads()}, engine threads: {default_threads()}, "
          f"cores: {os.cpu_count()}, load average: {load:.2f}, onnxruntime {ort.__version__}, "
          f"denormals flushed: {not args.keep_denormals}, OMP_WAIT_POLICY: {os.environ.get('OMP_WAIT_POLICY', 'unset')}"
          f"{', global pools' if args.global_pool else ''}", flush=True)
    common = ["--repeat", str(args.repeat), "--rounds", str(args.rounds)] + (["--keep-denormals"] if args.keep_denormals else [])
    for model in args.models:
        bench_model(model, option_sets(args.options, args.global_pool), args.repeat, args.rounds,
                    ort_runs=0 if child else args.ort_runs)
        if args.options:  # global pools exclude per-session pools in one process: measured in a child process
            subprocess.run([sys.executable, "-m", "suites.benchmarks.bench_segments", "--global-pool", "--models", model, *common],
                           check=False)
        if args.omp_passive:
            subprocess.run([sys.executable, "-m", "suites.benchmarks.bench_segments", "--models", model, *common],
                           check=False, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})


if __name__ == "__main__":
    main()
