"""The GPU check: the zoo through every GPU backend present, in fp32, fp16 and tf32, checked and timed against eager.

    python -m trtcheck.tools.gpu_check [--out DIR] [--models 'resnet*,seed_*'] [--modes fp32,mixed-fp16,tf32] [--budget 420]

On a CUDA machine it

1. reports what it found: the GPUs (name, compute capability, memory), CUDA and cuDNN as torch sees them,
   torch, TensorRT, ONNX Runtime and its execution providers, and the trtcheck backends that can run;
2. runs every zoo model (``import trtcheck_zoo as models``) through every GPU backend present: ``tensorrt``
   (TensorRT, if installed) and ``onnxruntime`` (only with ONNX Runtime's CUDAExecutionProvider: the CPU
   provider is not a GPU backend), in each mode: ``fp32`` (float32 model, ``precision="fp32"``, TF32 off in
   TensorRT and in torch), ``fp16`` (the model and its float inputs in float16, ``precision="fp16"``),
   ``mixed-fp16`` (float32 model, ``precision="fp16"``: the segment's mixed-precision ONNX graph, float32 at the
   engine's I/O, which TensorRT 11 builds strongly typed) and ``tf32`` (float32 model, ``Settings(tf32=True)``:
   TensorRT's float32 matmuls and convolutions on TF32, as Torch-TensorRT builds by default; eager stays float32);
   the ModelOpt-quantized entries (``--models 'quantized_*'``: INT8, FP8 and NVFP4 engines from explicit Q/DQ) in
   ``fp32`` mode only, judged by the quantized rule (``verification.judge``: a code flipped at a rounding tie is
   rounding);
3. checks each compiled module against eager on the example inputs and a second input set (fp32: the zoo
   matrix's tolerances; fp16 and tf32 modes: rtol 1e-2 and atol 1e-2 of the largest eager output), and fails on
   fallbacks (a segment TensorRT's parser refused, an engine that did not build);
4. times eager and stitched, each call followed by ``torch.cuda.synchronize()`` (3 warm-up calls, then
   ``--rounds`` timed calls);
5. writes into one folder (``--out``, else ``$OUT``, else ``gpu-check/``): ``environment.json``,
   ``benchmark.json`` (pytest-benchmark's JSON format, ``trtcheck.benchmarking.extra_info`` per benchmark, so
   ``trtcheck report`` and ``pytest-benchmark compare`` read it), ``report.md``/``report.html`` (``trtcheck
   report``) and ``summary.txt``.

It keeps to ``--budget`` seconds (default 420, so that a run fits in 8 minutes with start-up and the
report): combinations not reached in time are listed as "not run (time budget)", never silently dropped.
Engines are built once per machine thanks to the engine cache (``--engine-cache-dir``), so later runs
reach further. Exit status: 0 when every combination that ran passed (also on a machine without CUDA,
where it says so and runs nothing), 1 when any failed or no GPU backend is present, 2 on bad arguments.

``--device cpu`` runs the same pipeline on the CPU with ONNX Runtime's CPU provider: a smoke test of this
script (``suites/tools/test_gpu_check.py``), not a GPU check.

NOT YET RUN ON A GPU: written against TensorRT's and torch's documented APIs on a machine with neither.
"""

from __future__ import annotations

import argparse
import datetime as _datetime
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WARMUP = 3
MODES: dict[str, tuple[str, str, bool]] = {  # mode -> (model dtype, Settings.precision, Settings.tf32)
    "fp32": ("float32", "fp32", False),
    "fp16": ("float16", "fp16", False),
    "mixed-fp16": ("float32", "fp16", False),
    "tf32": ("float32", "fp32", True),
}
DEFAULT_MODES = "fp32,fp16,mixed-fp16,tf32"
FP16_TOLERANCE = 1e-2  # fp16 modes and tf32: both round to 10-bit mantissas (unit roundoff 2**-11)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trtcheck.tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="output folder (default: $OUT, else gpu-check/)")
    parser.add_argument("--models", default="*", help="zoo names or globs, comma separated (default: every model)")
    parser.add_argument("--modes", default=DEFAULT_MODES, help=f"comma separated, of {', '.join(MODES)} (default: {DEFAULT_MODES})")
    parser.add_argument("--backends", default="", help="comma separated subset of the GPU backends found (default: all)")
    parser.add_argument("--min-block-size", type=int, default=5, help="Settings.min_block_size (default 5, trtcheck's default)")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls per variant (default 20)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the models, start-up excluded (default 420)")
    parser.add_argument("--engine-cache-dir", help="TensorRT engine cache (default: Settings' default, ~/.cache/trtcheck/engines)")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: smoke-test this script on ONNX Runtime's CPU provider"
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; the modes are {', '.join(MODES)}")
    if args.rounds < 1 or args.budget <= 0:
        parser.error("--rounds must be >= 1 and --budget > 0")
    return args


# -- what is here -------------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": None,
        "gpus": [],
        "onnxruntime": ort.__version__,
        "onnxruntime_providers": list(ort.get_available_providers()),
    }
    if info["cuda_available"]:
        info["cudnn"] = torch.backends.cudnn.version()
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            info["gpus"].append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / 2**30, 1),
                }
            )
    try:
        import tensorrt

        info["tensorrt"] = str(getattr(tensorrt, "__version__", "unknown version"))
    except ImportError as error:
        info["tensorrt"] = None
        info["tensorrt_missing"] = str(error) or type(error).__name__
    try:
        import trtcheck  # deferred: the environment is reported even where this fails
        from trtcheck.engines import available_backends  # deferred: the environment is reported even where this fails

        info["trtcheck"] = trtcheck.__version__
        info["trtcheck_backends"] = available_backends()
    except Exception as error:  # noqa: BLE001 - the report must come out even if trtcheck is broken
        info["trtcheck"] = f"import failed: {type(error).__name__}: {error}"
    return info


def describe(info: dict[str, Any]) -> list[str]:
    gpus = "; ".join(f"cuda:{g['index']} {g['name']} (sm {g['capability']}, {g['memory_gib']} GiB)" for g in info["gpus"]) or "none"
    tensorrt = info["tensorrt"] or f"not installed ({info.get('tensorrt_missing', '')})"
    return [
        f"GPU: {gpus}",
        f"CUDA: {'available' if info['cuda_available'] else 'not available'} "
        f"(torch built with CUDA {info['torch_cuda']}, cuDNN {info['cudnn']})",
        f"torch {info['torch']}, Python {info['python']}",
        f"TensorRT: {tensorrt}",
        f"ONNX Runtime {info['onnxruntime']}: providers {', '.join(info['onnxruntime_providers'])}",
        f"trtcheck {info.get('trtcheck')}: backends that can run here: {', '.join(info.get('trtcheck_backends', [])) or 'none'}",
    ]


def gpu_backends(info: dict[str, Any], device: str) -> tuple[list[str], list[str]]:
    """The backends to check on ``device``, and why each other one is left out."""
    if device == "cpu":
        return ["onnxruntime"], ["tensorrt: not on --device cpu"]
    chosen, skipped = [], []
    if "tensorrt" in info.get("trtcheck_backends", []):
        chosen.append("tensorrt")
    else:
        skipped.append(f"tensorrt: {'TensorRT is not installed' if info['tensorrt'] is None else 'trtcheck cannot run it here'}")
    if "CUDAExecutionProvider" in info["onnxruntime_providers"]:
        chosen.append("onnxruntime")
    else:
        skipped.append("onnxruntime: no CUDAExecutionProvider (pip install onnxruntime-gpu)")
    return chosen, skipped


# -- one combination ------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    model: str
    backend: str
    mode: str
    status: str = "not run (time budget)"  # "pass", "FAIL: ...", "ERROR: ...", "skipped: ..."
    seconds: float = 0.0
    eager_median: float | None = None
    stitched_median: float | None = None
    benchmarks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status.startswith(("FAIL", "ERROR"))

    def line(self) -> str:
        speed = ""
        if self.eager_median and self.stitched_median:
            speed = (
                f"  eager {self.eager_median * 1e3:.3f} ms, stitched {self.stitched_median * 1e3:.3f} ms "
                f"({self.eager_median / self.stitched_median:.2f}x)"
            )
        return f"{self.model:22s} {self.backend:12s} {self.mode:10s} {self.status}{speed}  [{self.seconds:.1f} s]"


def _to(value: Any, device: Any, dtype: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def move(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        leaf = leaf.to(device)
        return leaf.to(dtype) if leaf.is_floating_point() else leaf

    return tree_map(move, value)


def _second_inputs(entry: Any, inputs: tuple) -> tuple:
    """The entry's own valid inputs where it has them, else the examples scaled by 1 +- 5% (signs kept)."""
    import torch
    from torch.utils._pytree import tree_map

    if entry.input_sets is not None:
        return tuple(entry.input_sets()[0])
    generator = torch.Generator().manual_seed(1)

    def perturb(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            noise = torch.rand(leaf.shape, generator=generator, dtype=torch.float32) * 0.1 - 0.05
            return leaf * (1 + noise).to(leaf.dtype)
        return leaf

    return tree_map(perturb, inputs)


def _tolerances(entry: Any, mode: str, eager_out: Any) -> dict[str, float]:
    import torch
    from torch.utils._pytree import tree_leaves

    floats = [t for t in tree_leaves(eager_out) if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point()]
    scale = max((float(t.detach().abs().float().max()) for t in floats), default=1.0)
    if mode == "fp32":
        # The zoo matrix's rule (suites/matrix/matrix_checks.py): deep torchvision models sum in another order.
        return {"atol": 1e-4 * max(scale, 1.0)} if "torchvision" in entry.tags else {}
    return {"rtol": FP16_TOLERANCE, "atol": FP16_TOLERANCE * max(scale, 1.0)}


def _timings(fn: Any, inputs: tuple, rounds: int, synchronize: Any) -> list[float]:
    for _ in range(WARMUP):
        fn(*inputs)
    synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*inputs)
        synchronize()
        times.append(time.perf_counter() - start)
    return times


def _benchmark(name: str, group: str, times: list[float], info: dict[str, Any]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for value in times:
        stats.update(value)
    data = stats.as_dict()
    data["iterations"] = 1
    data["data"] = times
    return {
        "group": group,
        "name": f"check[{name}]",
        "fullname": f"trtcheck/tools/gpu_check.py::check[{name}]",
        "params": {"case": name},
        "param": name,
        "extra_info": info,
        "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": len(times), "max_time": 0, "min_time": 0, "warmup": WARMUP},
        "stats": data,
    }


def run_one(entry: Any, backend: str, mode: str, args: argparse.Namespace, device: Any, outcome: Outcome) -> None:
    import torch

    import trtcheck  # deferred: the environment is reported even where this fails
    from trtcheck.benchmarking import extra_info  # deferred: the environment is reported even where this fails
    from trtcheck.engines import OnnxRuntimeEngine  # deferred: the environment is reported even where this fails
    from trtcheck.lowering.quantized import eager_quantizers  # deferred: the environment is reported even where this fails
    from trtcheck.verification.equivalence import compare_outputs  # deferred: the environment is reported even where this fails
    from trtcheck.verification.judge import Judge  # deferred: the environment is reported even where this fails

    dtype_name, precision, tf32 = MODES[mode]
    dtype = getattr(torch, dtype_name)
    quantized = "quantized" in entry.tags
    if quantized and mode != "fp32":
        outcome.status = "skipped: a quantized entry runs in fp32 mode only (its Q/DQ pairs fix its precision)"
        return
    model, inputs = entry.build()
    model = model.to(device).to(dtype) if dtype != torch.float32 else model.to(device)
    inputs = _to(tuple(inputs), device, dtype)
    second = _to(_second_inputs(entry, inputs), device, dtype)
    cache_dir = {"engine_cache_dir": args.engine_cache_dir} if args.engine_cache_dir else {}
    settings = trtcheck.Settings(min_block_size=args.min_block_size, precision=precision, tf32=tf32, **cache_dir)
    with torch.inference_mode(), eager_quantizers(model):
        try:
            model(*inputs)  # an op without a float16 kernel on this device fails here, before any compile
        except Exception as error:  # noqa: BLE001
            first_line = str(error).splitlines()[0] if str(error) else ""
            outcome.status = f"skipped: eager fails in {dtype_name} on {device.type}: {type(error).__name__}: {first_line}"
            return
    model, inputs = entry.build()  # afresh: that call advanced a stateful model (a call counter)
    model = model.to(device).to(dtype) if dtype != torch.float32 else model.to(device)
    inputs = _to(tuple(inputs), device, dtype)
    try:
        stitched = trtcheck.compile(model, inputs, settings, backend)
    except trtcheck.PartitionError as error:
        outcome.status = f"skipped: {str(error).splitlines()[0]}"
        return
    if backend == "onnxruntime" and device.type == "cuda":
        on_cpu = [
            i
            for i, e in stitched.engines.items()
            if isinstance(e, OnnxRuntimeEngine) and e.session.get_providers()[0] != "CUDAExecutionProvider"
        ]
        if on_cpu:
            outcome.status = f"ERROR: ONNX Runtime sessions of segments {on_cpu} fell back to the CPU provider (see ONNX Runtime's log)"
            return
    judge = Judge.of_partition(stitched.partition) if quantized else None  # explicit Q/DQ: the quantized rule
    with torch.inference_mode(), eager_quantizers(model):  # ModelOpt's NVFP4 runs eagerly with CUDA only (--device cpu)
        comparisons = []
        for x in (inputs, second):  # eager then stitched on each set: a stateful model advances alike on both
            expected, actual = model(*x), stitched(*x)
            if judge is None:
                comparisons.append(compare_outputs(expected, actual, **_tolerances(entry, mode, expected)))
                continue
            comparison = judge.compare(expected, actual)
            judge.judge_call(comparison, model, x, {}, expected, actual)  # ties flipped by float32 arithmetic pass
            comparisons.append(comparison)
        failed = [c for c in comparisons if not c.passed]
        equivalence = {
            "passed": not failed,
            "max_abs": max((o.max_abs for c in comparisons for o in c.outputs), default=0.0),
            "cosine": min((o.cosine for c in comparisons for o in c.outputs), default=1.0),
        }
        synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        preset = f"{backend}-{mode}"
        group = f"{entry.name}-{preset}"
        for variant, fn in (("eager", model), ("stitched", stitched)):
            times = _timings(fn, inputs, args.rounds, synchronize)
            info = extra_info(entry.name, preset, variant, backend, stitched, equivalence)
            info.update(precision=precision, tf32=tf32, dtype=dtype_name, device=str(device), min_block_size=args.min_block_size)
            outcome.benchmarks.append(_benchmark(f"{entry.name}-{preset}-{variant}", group, times, info))
            median = sorted(times)[len(times) // 2]
            if variant == "eager":
                outcome.eager_median = median
            else:
                outcome.stitched_median = median
    problems = []
    if failed:
        problems.append("outputs differ from eager: " + str(failed[0]).splitlines()[0])
    if stitched.partition.fallbacks:
        problems.append(f"{len(stitched.partition.fallbacks)} segment(s) fell back to PyTorch: {stitched.partition.fallbacks[0]}")
    outcome.status = "FAIL: " + "; ".join(problems) if problems else "pass"


# -- the whole check ---------------------------------------------------------------------------------------------------


def select_models(pattern: str) -> list[Any]:
    import trtcheck_zoo as models  # deferred: the environment is reported even where this fails

    names: list[str] = []
    for glob in (p.strip() for p in pattern.split(",") if p.strip()):
        matched = models.names(glob)  # "*" is every model but the opt-in ones, which "quantized_*" names
        if not matched:
            raise SystemExit(f"gpu check: --models {glob!r} matches no zoo model; the zoo has {', '.join(models.names())}")
        names.extend(n for n in matched if n not in names)
    skipped = [n for n in names if "detection" in models.get(n).tags]
    if skipped:  # the GPU check compiles through torch.export; a detector deploys through torch.compile
        print(f"gpu check: leaving out {', '.join(skipped)}: a detector runs under torch.compile (docs/graph-breaks.md), "
              "which this check does not build or time yet", flush=True)
    entries = [models.get(n) for n in names if n not in skipped]
    return sorted(entries, key=lambda e: "heavy" in e.tags)  # heavy models last: the budget reaches the most models


def output_dir(args: argparse.Namespace) -> Path:
    out = Path(args.out or os.environ.get("OUT") or "gpu-check")
    out.mkdir(parents=True, exist_ok=True)
    return out


def benchmark_json(info: dict[str, Any], outcomes: list[Outcome], started: _datetime.datetime) -> dict[str, Any]:
    import pytest_benchmark
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
    from pytest_benchmark.utils import get_commit_info

    machine = pytest_benchmark_generate_machine_info()
    machine["gpu"] = "; ".join(f"{g['name']} (sm {g['capability']})" for g in info["gpus"]) or None
    machine["trtcheck_environment"] = info
    return {
        "machine_info": machine,
        "commit_info": get_commit_info(),
        "benchmarks": [b for o in outcomes for b in o.benchmarks],
        "datetime": started.isoformat(),
        "version": pytest_benchmark.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    started = _datetime.datetime.now(_datetime.UTC)
    info = environment()
    for line in describe(info):
        print(f"gpu check: {line}")
    if args.device == "cuda" and not info["cuda_available"]:
        with_cuda = f"with CUDA {info['torch_cuda']}" if info["torch_cuda"] else "without CUDA"
        built = f"torch {info['torch']} built {with_cuda}"
        print(f"gpu check: no CUDA device here (torch.cuda.is_available() is False; {built}): nothing run.")
        return 0
    backends, left_out = gpu_backends(info, args.device)
    if args.backends:
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        left_out += [f"{b}: not in --backends" for b in backends if b not in wanted]
        backends = [b for b in backends if b in wanted]
    for why in left_out:
        print(f"gpu check: left out {why}")
    out = output_dir(args)
    (out / "environment.json").write_text(json.dumps(info, indent=2) + "\n")
    if not backends:
        print("gpu check: FAILED: no GPU backend to check (install TensorRT: pip install 'trtcheck[tensorrt]', or onnxruntime-gpu)")
        return 1

    import torch

    if args.device == "cuda":
        # Eager is the float32 reference in every float32 mode (tf32 included: the engine's TF32 is what is checked):
        # torch's cuDNN convolutions default to TF32 on Ampere and newer.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    entries = select_models(args.models)
    modes = args.modes.split(",")
    outcomes = [Outcome(e.name, b, m) for e in entries for m in modes for b in backends]
    deadline = began + args.budget
    print(
        f"gpu check: {len(outcomes)} combinations ({len(entries)} models x {', '.join(modes)} x {', '.join(backends)}), "
        f"budget {args.budget:.0f} s"
    )
    for outcome in outcomes:
        if time.monotonic() >= deadline:
            break
        entry = next(e for e in entries if e.name == outcome.model)
        start = time.monotonic()
        try:
            run_one(entry, outcome.backend, outcome.mode, args, device, outcome)
        except Exception as error:  # noqa: BLE001 - one combination's failure is reported, the rest still run
            outcome.status = f"ERROR: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            traceback.print_exc()
        outcome.seconds = time.monotonic() - start
        print(f"gpu check: {outcome.line()}", flush=True)

    data = benchmark_json(info, outcomes, started)
    (out / "benchmark.json").write_text(json.dumps(data, indent=2) + "\n")
    report_lines = []
    if data["benchmarks"]:
        from trtcheck import report  # deferred: the environment is reported even where this fails

        result = report.write_report(report.load_runs([out / "benchmark.json"]), out)
        report_lines = [f"report: {result.markdown} and {result.html}"]
    else:
        report_lines = ["report: nothing was timed, no report written"]
    not_run = [o for o in outcomes if o.status.startswith("not run")]
    failed = [o for o in outcomes if o.failed]
    passed = [o for o in outcomes if o.status == "pass"]
    summary = [
        *describe(info),
        *(f"left out {why}" for why in left_out),
        "",
        *(o.line() for o in outcomes),
        "",
        (
            f"{len(passed)} passed, {len(failed)} failed, {len(outcomes) - len(passed) - len(failed) - len(not_run)} skipped, "
            f"{len(not_run)} not run (time budget {args.budget:.0f} s), in {time.monotonic() - began:.0f} s"
        ),
        *report_lines,
    ]
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    for line in summary[-1 - len(report_lines):]:
        print(f"gpu check: {line}")
    print(f"gpu check: wrote {out}/benchmark.json, environment.json, summary.txt")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
