"""Compile time and memory of ``trtcheck.compile`` against ``torch.onnx.export`` + one ONNX Runtime session,
and (``--latency``) the latency of stitched modules.

    python -m suites.benchmarks.bench_compile [--models vit_b_16 resnet18 resnet50 bert_base] [--repeat 3]
    python -m suites.benchmarks.bench_compile --zoo [--exclude heavy] [--repeat 1] [--json out.json] [--no-shape-check]
    python -m suites.benchmarks.bench_compile --latency [--models resnet18 mobilenet_v3_small] [--repeat 20]

**Compile** (the default). Per model, each measurement in a fresh process (``python -m
suites.benchmarks.bench_compile --child TOOL MODEL``), the two tools interleaved, ``--repeat`` rounds:

* ``trtcheck``: ``trtcheck.compile(model, inputs, backend="onnxruntime")`` (the zoo entry's
  ``dynamic_shapes`` when it has them), its wall time and its phases (``CompiledModule.compile_times``);
* ``peer``: ``torch.onnx.export(model, inputs, path, dynamo=True)`` into a temporary directory, then one
  ``onnxruntime.InferenceSession`` on that file (CPU): export and session times.

Both children import what their tool imports (torch, trtcheck's converters, onnxscript, onnxruntime) and build
the model before anything is measured; the peak RSS of the work is ``ru_maxrss`` after it minus the RSS before
it, with the peak reset to the current RSS just before (``/proc/self/clear_refs``), so the model's own memory
(its weights) is not counted and a transient peak of building it does not hide the tool's. Ratios are
trtcheck / peer: at most 1.0 means trtcheck compiles as fast, in as little memory, as the exporter plus a
session. Medians over the rounds. Under each row, the RSS (MiB above the start) when each phase last ended, for
trtcheck (lowering, partitioning, shape analysis, conversion, engine build, stitching) and the peer (export,
session), and the peak: where the memory went. ``--no-shape-check`` compiles with ``check_shapes=False``: the
difference is what shape analysis's one run of the model costs (the first run of PyTorch's kernels in the
process: their code pages and the libraries' state), which the peer never makes. The models: any zoo name,
``--zoo`` (every zoo entry), and ``bert_base``: ``transformers``' ``BertModel`` at BERT-base size (110M
parameters, random weights, no download) on 2 x 128 tokens, when ``transformers`` is importable.
``--fixed-mmap-threshold`` runs both tools' processes with glibc's mmap threshold fixed at its default (128 KiB),
which otherwise rises to the size of the largest mmapped block freed (up to 32 MiB) and lets the heap keep twice
that free: trtcheck's shape analysis frees activations and im2col buffers before the engine is built (vgg11's run
leaves the threshold at about 28 MiB), the peer frees none, and ONNX Runtime's session then keeps more of its own
freed memory in trtcheck's heap (vgg11 in one process, when MKL's buffers were still freed before the build: peak
936 against the peer's 909 MiB as glibc behaves, 882 against 896 fixed).
``torch.onnx.export(dynamo=True)`` needs ``onnxscript`` (``pip install onnxscript``): without it the peer column
says so.

**Latency** (``--latency``): median latency of eager, of the stitched module (default settings, ONNX Runtime
backend) and of one ONNX Runtime session over the whole model's ONNX (trtcheck's converters, all nodes in one
segment), and the stitched/whole ratio (target: within 1.05x when the model is fully convertible). Then the
overhead of one extra TensorRT/Torch boundary (target < 30 us), measured on a chain of cheap ops on a tiny
tensor split into k engines, and the time to convert a 50-node segment (target < 50 ms).

A benchmark, not a test: it prints ratios measured in one run and asserts nothing.

Denormal floats are flushed to zero (``torch.set_flush_denormal(True)``) unless ``--keep-denormals``: the
random-weight torchvision models produce denormal activations, which make eager PyTorch on x86 CPUs about
50x slower (measured: resnet18 930 ms vs 17 ms) while ONNX Runtime is unaffected; comparing that would
measure the CPU's denormal handling, not partitioning (compile runs the model once, for shape analysis).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

import trtcheck
import trtcheck_zoo as models
from trtcheck.compiler.clock import Clock
from trtcheck.conversion import segment_to_onnx
from trtcheck.engines import TensorSpec, build_engine
from trtcheck.partitioning.extract import segment_module
from trtcheck.shapes import segment_shapes

BERT = "bert_base"
DEFAULT_MODELS = ["vit_b_16", "resnet18", "resnet50", BERT]
TOOLS = ("trtcheck", "peer")
PHASES = ("lowering", "partitioning", "shape_analysis", "conversion", "engine_build", "stitching")


def median_seconds(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


# ---- compile time and memory, one fresh process per measurement ---------------------------------------------


class _Bert(torch.nn.Module):
    """``BertModel`` called with positional ``(input_ids, attention_mask)``, returning a tuple of tensors."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def bert_available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def build_model(name: str) -> tuple[torch.nn.Module, tuple, Any]:
    """``(model, example_inputs, dynamic_shapes)`` of a zoo entry or of ``bert_base``."""
    if name == BERT:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig()  # BERT-base: 12 layers, hidden 768, 12 heads, vocabulary 30522: 110M parameters
        model = _Bert(BertModel(config, add_pooling_layer=True)).eval()
        ids = torch.randint(0, config.vocab_size, (2, 128))
        mask = torch.ones(2, 128, dtype=torch.int64)
        mask[1, 100:] = 0  # the second sequence padded
        return model, (ids, mask), None
    entry = models.get(name)
    model, inputs = entry.build()
    return model, tuple(inputs), entry.dynamic_shapes


def rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def reset_peak() -> bool:
    """Reset this process's peak RSS (``ru_maxrss``) to its current RSS; False where the kernel does not let it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


class _PhaseMemory:
    """RSS above ``base`` (MiB) when each phase of compile last ended, and the peak by then: where the memory went.
    Instrumentation of this benchmark only: it wraps ``Clock.run`` for the duration of one measurement."""

    def __init__(self, base_kib: int) -> None:
        self.base_kib, self.after = base_kib, {}
        self._run = Clock.run

    def __enter__(self) -> dict[str, dict[str, float]]:
        record, run = self.record, self._run

        def timed(clock, phase, fn, *args, **kwargs):
            try:
                return run(clock, phase, fn, *args, **kwargs)
            finally:
                record(phase)

        Clock.run = timed
        return self.after

    def __exit__(self, *exc_info) -> None:
        Clock.run = self._run

    def record(self, phase: str) -> None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.after[phase] = {"rss_mib": (rss_kib() - self.base_kib) / 1024, "peak_mib": (peak - self.base_kib) / 1024}


def _run_trtcheck(model, inputs, dynamic_shapes, check_shapes: bool = True) -> dict[str, Any]:
    with _PhaseMemory(rss_kib()) as memory:
        start = time.perf_counter()
        compiled = trtcheck.compile(model, inputs, backend="onnxruntime", dynamic_shapes=dynamic_shapes,
                                    check_shapes=check_shapes)
        seconds = time.perf_counter() - start
    times = compiled.compile_times
    phases = {phase: getattr(times, phase) for phase in PHASES}
    phases["other"] = seconds - sum(phases.values())
    return {"seconds": seconds, "phases": phases, "summary": compiled.partition.summary(),
            "fallbacks": len(compiled.partition.fallbacks), "memory": memory}


def _run_peer(model, inputs, dynamic_shapes) -> dict[str, Any]:
    import onnxruntime as ort

    memory = _PhaseMemory(rss_kib())
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        start = time.perf_counter()
        torch.onnx.export(model, inputs, path, dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False)
        exported = time.perf_counter()
        memory.record("export")
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        end = time.perf_counter()
        memory.record("session")
        del session
    return {"seconds": end - start, "phases": {"export": exported - start, "session": end - exported},
            "memory": memory.after}


def child(tool: str, name: str, keep_denormals: bool, check_shapes: bool = True) -> None:
    """One measurement, in this (fresh) process: prints one JSON line."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_flush_denormal(not keep_denormals)
    if tool == "trtcheck":  # what compile imports, before anything is measured
        import trtcheck.compiler.pipeline
        import trtcheck.engines.onnxruntime  # noqa: F401
    else:
        import importlib

        for module in ("onnxruntime", "onnxscript", "torch.onnx._internal.exporter._core"):
            importlib.import_module(module)
    model, inputs, dynamic_shapes = build_model(name)
    run = functools.partial(_run_trtcheck, check_shapes=check_shapes) if tool == "trtcheck" else _run_peer
    gc.collect()
    reset = reset_peak()
    before = rss_kib()
    try:
        result = run(model, inputs, dynamic_shapes)
    except Exception as error:  # noqa: BLE001 - a benchmark reports a tool's failure and goes on
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.update(peak_mib=(peak - before) / 1024, model_mib=before / 1024, peak_reset=reset)
    print("RESULT " + json.dumps(result), flush=True)


def measure(tool: str, name: str, keep_denormals: bool, timeout: float, check_shapes: bool = True) -> dict[str, Any]:
    command = [sys.executable, "-m", "suites.benchmarks.bench_compile", "--child", tool, name]
    if keep_denormals:
        command.append("--keep-denormals")
    if not check_shapes:
        command.append("--no-shape-check")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child exited {done.returncode}: {tail[:300]}"}
    return json.loads(lines[-1].removeprefix("RESULT "))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _phases(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {phase: statistics.median(run["phases"][phase] for run in runs) for phase in runs[0]["phases"]}


def _phase_memory(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median RSS (MiB above the start) when each phase last ended, over the runs that went through it."""
    phases = dict.fromkeys(phase for run in runs for phase in run.get("memory", {}))
    return {phase: statistics.median(run["memory"][phase]["rss_mib"] for run in runs if phase in run["memory"])
            for phase in phases}


def _format_memory(memory: dict[str, float], peak: float) -> str:
    return ", ".join(f"{phase} {mib:.0f}" for phase, mib in memory.items()) + f" (peak {peak:.0f})"


def _format_phases(phases: dict[str, float]) -> str:
    return " ".join(f"{phase} {seconds:.2f}" for phase, seconds in phases.items() if seconds >= 0.005)


FIXED_MMAP_THRESHOLD = "glibc.malloc.mmap_threshold=131072"
"""glibc's default threshold, fixed: a tunable that sets it turns its dynamic raising off (``--fixed-mmap-threshold``)."""


def compare_compile(
    names: list[str], repeat: int, keep_denormals: bool, timeout: float, check_shapes: bool = True
) -> list[dict[str, Any]]:
    """Measure each model ``repeat`` times per tool (fresh processes, tools interleaved) and print the table.

    The tool that goes first alternates between rounds (trtcheck in the first): on this VM memory a process touches
    for the first time costs more than memory another process just freed, so the second tool of a round profits
    from the first's. Measured on vgg11 (507 MiB of weights, each tool writing and mapping them once), ``--repeat
    3`` always in one order: time ratio 1.03-1.55 with trtcheck first, 0.88 with the peer first."""
    print(f"compile: trtcheck.compile (onnxruntime{'' if check_shapes else ', check_shapes=False'}) vs "
          f"torch.onnx.export(dynamo=True) + one ORT session; "
          f"fresh process each, median of {repeat}; torch threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'model':28s} {'trtcheck s':>10s} {'peer s':>7s} {'time x':>7s} {'trtcheck MiB':>12s} {'peer MiB':>9s} "
          f"{'mem x':>6s} {'model MiB':>9s}", flush=True)
    rows = []
    for name in names:
        runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in TOOLS}
        errors: dict[str, str] = {}
        for round_ in range(repeat):
            for tool in TOOLS if round_ % 2 == 0 else TOOLS[::-1]:  # who goes first alternates: see below
                if tool in errors:
                    continue
                result = measure(tool, name, keep_denormals, timeout, check_shapes=check_shapes)
                if "error" in result:
                    errors[tool] = result["error"]
                else:
                    runs[tool].append(result)
        row: dict[str, Any] = {"model": name, "errors": errors}
        for tool in TOOLS:
            if runs[tool]:
                row[tool] = {"seconds": _median(runs[tool], "seconds"), "peak_mib": _median(runs[tool], "peak_mib"),
                             "model_mib": _median(runs[tool], "model_mib"), "phases": _phases(runs[tool]),
                             "memory": _phase_memory(runs[tool]), "runs": runs[tool]}
        if "trtcheck" in row and "peer" in row:
            row["time_ratio"] = row["trtcheck"]["seconds"] / row["peer"]["seconds"]
            row["memory_ratio"] = row["trtcheck"]["peak_mib"] / max(row["peer"]["peak_mib"], 1.0)
        rows.append(row)
        _print_row(row)
    _print_summary(rows)
    return rows


def _print_row(row: dict[str, Any]) -> None:
    ours, peer = row.get("trtcheck"), row.get("peer")
    cells = [f"{row['model']:28s}"]
    cells.append(f"{ours['seconds']:10.2f}" if ours else f"{'-':>10s}")
    cells.append(f"{peer['seconds']:7.2f}" if peer else f"{'-':>7s}")
    cells.append(f"{row['time_ratio']:7.2f}" if "time_ratio" in row else f"{'-':>7s}")
    cells.append(f"{ours['peak_mib']:12.0f}" if ours else f"{'-':>12s}")
    cells.append(f"{peer['peak_mib']:9.0f}" if peer else f"{'-':>9s}")
    cells.append(f"{row['memory_ratio']:6.2f}" if "memory_ratio" in row else f"{'-':>6s}")
    model_mib = (ours or peer or {}).get("model_mib")
    cells.append(f"{model_mib:9.0f}" if model_mib is not None else f"{'-':>9s}")
    print(" ".join(cells), flush=True)
    if ours:
        print(f"    trtcheck: {_format_phases(ours['phases'])}   ({ours['runs'][0]['summary']})", flush=True)
    if peer:
        print(f"    peer:     {_format_phases(peer['phases'])}", flush=True)
    if ours and peer:
        print(f"    MiB after each phase: trtcheck {_format_memory(ours['memory'], ours['peak_mib'])}; "
              f"peer {_format_memory(peer['memory'], peer['peak_mib'])}", flush=True)
    for tool, error in row["errors"].items():
        print(f"    {tool} failed: {error}", flush=True)


def _print_summary(rows: list[dict[str, Any]]) -> None:
    both = [row for row in rows if "time_ratio" in row]
    print(f"summary: {len(rows)} models, {len(both)} measured by both tools", flush=True)
    if not both:
        return
    for key, label in (("time_ratio", "time"), ("memory_ratio", "peak memory")):
        ratios = [row[key] for row in both]
        over = [f"{row['model']} {row[key]:.2f}" for row in both if row[key] > 1.0]
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"  {label} ratio trtcheck/peer: geometric mean {geomean:.2f}, max {max(ratios):.2f}, "
              f"<= 1.0 on {len(ratios) - len(over)} of {len(ratios)}" + (f"; above 1.0: {', '.join(over)}" if over else ""),
              flush=True)
    failed = [f"{row['model']} ({', '.join(row['errors'])})" for row in rows if row["errors"]]
    if failed:
        print(f"  failed: {'; '.join(failed)}", flush=True)


# ---- latency of stitched modules --------------------------------------------------------------------------


def whole_model_engine(model, inputs):
    """One engine over the whole graph: the best an all-TensorRT compile could do."""
    settings = trtcheck.Settings(require_full_compilation=True)
    partition = trtcheck.partition(model, inputs, settings)
    (segment,) = partition.segments
    shapes = segment_shapes(segment)
    outputs = [TensorSpec(f"output_{i}", s.shape, s.dtype) for i, s in enumerate(shapes.outputs)]
    return build_engine(segment_to_onnx(segment_module(partition.graph_module, segment)), shapes.inputs, outputs, "onnxruntime")


def compare_models(names, repeat: int) -> None:
    print(f"{'model':20s} {'eager ms':>9s} {'stitched ms':>12s} {'whole ms':>9s} {'stitched/whole':>15s} {'eager/stitched':>15s}")
    for name in names:
        model, inputs = models.get(name).build()
        stitched = trtcheck.compile(model, inputs, backend="onnxruntime")
        whole = whole_model_engine(model, inputs)
        with torch.inference_mode():
            eager = median_seconds(functools.partial(model, *inputs), repeat)
            ours = median_seconds(functools.partial(stitched, *inputs), repeat)
            single = median_seconds(functools.partial(whole, *inputs), repeat)
        print(f"{name:20s} {eager * 1e3:9.2f} {ours * 1e3:12.2f} {single * 1e3:9.2f} {ours / single:15.3f} {eager / ours:15.2f}"
              f"   ({stitched.partition.summary()})", flush=True)


class Chain(torch.nn.Module):
    """Cheap ops on a tiny tensor: time is dominated by per-call overheads, not arithmetic."""

    def forward(self, x):
        for _ in range(8):
            x = torch.sin(x) + 1.0
        return x


def boundary_overhead(repeat: int) -> None:
    """Per-boundary cost: the chain in 1 engine vs the chain cut by forcing every sin to PyTorch."""
    model, inputs = Chain(), (torch.randn(4),)
    one = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    cut = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sin"]), backend="onnxruntime")
    boundaries = len(cut.partition.segments) - 1
    sin_nodes = [n for n in cut.partition.compute_nodes if n.target is torch.ops.aten.sin.default]
    x = inputs[0]
    with torch.inference_mode():
        t_one = median_seconds(lambda: one(x), repeat * 50)
        t_cut = median_seconds(lambda: cut(x), repeat * 50)
        t_sin = median_seconds(lambda: torch.ops.aten.sin.default(x), repeat * 50)  # work moved to Torch
    per_boundary = (t_cut - t_one - len(sin_nodes) * t_sin) / boundaries
    print(f"boundary overhead: 1 engine {t_one * 1e6:.1f} us, {len(cut.partition.segments)} segments "
          f"{t_cut * 1e6:.1f} us, aten.sin {t_sin * 1e6:.1f} us -> {per_boundary * 1e6:.1f} us per boundary", flush=True)


def conversion_time(repeat: int) -> None:
    model, inputs = models.get("resnet18").build()
    partition = trtcheck.partition(model, inputs)
    segment = partition.segments[0]
    segment.nodes = segment.nodes[:50]  # a 50-node segment (a plain data object: cutting it is allowed)
    module = segment_module(partition.graph_module, segment)
    seconds = median_seconds(lambda: segment_to_onnx(module), repeat)
    print(f"conversion of a 50-node segment (resnet18's first 50 nodes): {seconds * 1e3:.1f} ms", flush=True)


def _selected(args: argparse.Namespace) -> list[str]:
    if args.zoo:
        names = [name for name in models.names() if not models.get(name).tags & set(args.exclude)]
        return [*names, BERT] if bert_available() and "bert" not in args.exclude else names
    names = args.models or DEFAULT_MODELS
    return [name for name in names if name != BERT or bert_available()]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", help=f"zoo names or {BERT} (default: {' '.join(DEFAULT_MODELS)})")
    parser.add_argument("--zoo", action="store_true", help=f"every zoo entry, and {BERT} when transformers is importable")
    parser.add_argument("--exclude", nargs="*", default=[], help="with --zoo: skip entries with these tags ('bert' skips bert_base)")
    parser.add_argument("--repeat", type=int, default=None, help="compile: rounds per model (3); latency: calls (20)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds one measurement may take")
    parser.add_argument("--json", help="compile: write every measurement to this file")
    parser.add_argument("--latency", action="store_true", help="the latency of stitched modules instead of compile time")
    parser.add_argument("--keep-denormals", action="store_true")
    parser.add_argument("--no-shape-check", action="store_true",
                        help="compile with check_shapes=False: what shape analysis's run of the model costs")
    parser.add_argument("--fixed-mmap-threshold", action="store_true",
                        help="both tools' processes with glibc's mmap threshold fixed at 128 KiB (GLIBC_TUNABLES): "
                             "what glibc's dynamic threshold costs (a diagnosis, not the measurement)")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child, keep_denormals=args.keep_denormals, check_shapes=not args.no_shape_check)
        return
    torch.set_flush_denormal(not args.keep_denormals)
    if args.fixed_mmap_threshold:  # inherited by every child; the tunable is read when a process starts
        os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), FIXED_MMAP_THRESHOLD]))
        print(f"GLIBC_TUNABLES={os.environ['GLIBC_TUNABLES']}")
    if args.latency:
        repeat = args.repeat or 20
        print(f"torch threads: {torch.get_num_threads()}, denormals flushed: {not args.keep_denormals}")
        compare_models(args.models or ["resnet18", "mobilenet_v3_small"], repeat)
        boundary_overhead(repeat)
        conversion_time(repeat)
        return
    rows = compare_compile(_selected(args), args.repeat or 3, args.keep_denormals, args.timeout,
                           check_shapes=not args.no_shape_check)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
