"""Many engines sharing the machine: eager vs stitched (one engine, many segments), per ONNX Runtime option.

    python -m suites.benchmarks.bench_segments [--models resnet18 mobilenet_v3_small] [--repeat 20] [--rounds 5]
                                               [--options] [--keep-denormals]

Per model, from one run: median latency of eager PyTorch, of the stitched module with default settings
(one engine) and of the stitched module with min_block_size 1 and ``aten::relu`` + ``aten::hardswish``
forced to PyTorch (many segments); the many/eager ratio (target <= 1) and the overhead per boundary from
``trtcheck.profile`` (target < 30 us), each with the engines' current session options ("new") and with
the options engines had before (per-session pools that keep spinning after a run: "old").

``--options`` compares more ONNX Runtime thread settings side by side (how ``OnnxRuntimeEngine``'s
default was chosen): spinning kept (old), spinning off (``allow_spinning=0``), spinning only while a run
is in progress (``force_spinning_stop=1``), one intra-op thread, one global thread pool shared by all
sessions (``use_per_session_threads=False`` after ``onnxruntime.set_global_thread_pool_sizes``; a process
with global pools cannot have per-session ones, so that row comes from a child process, with its own eager
time and ratios).

Timing: the variants are timed in interleaved rounds (each round times every variant ``--repeat`` times
and keeps the median), and the median over ``--rounds`` rounds is printed, so that a change in machine
load hits every variant alike. Denormals are flushed (see bench_compile.py) unless ``--keep-denormals``.
A benchmark, not a test: it prints what it measured and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import onnx
import onnxruntime as ort
import torch

import trtcheck
import trtcheck_zoo as models
from suites.benchmarks.bench_compile import median_seconds
from trtcheck.engines.onnxruntime import OnnxRuntimeEngine, default_threads, session_options
from trtcheck.profiling import profile
from trtcheck.stitching import EngineModule

MANY = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu", "aten::hardswish"])


def old_options() -> ort.SessionOptions:
    """The session options engines had before issue 10: per-session pool, idle workers keep spinning."""
    return session_options(spin="always")


def option_sets(options: bool, global_pool: bool) -> dict[str, ort.SessionOptions | None]:
    if global_pool:  # this process configured ONNX Runtime's global pools: every session must use them
        shared = session_options(spin="always")  # global pools spin as configured in C; Python cannot change it
        shared.use_per_session_threads = False
        return {"global pool": shared}
    sets: dict[str, ort.SessionOptions | None] = {"new (default)": None, "old: spin": old_options()}
    if options:
        sets.update({
            "allow_spinning=0": session_options(spin="never"),
            "force_spinning_stop=1": session_options(spin="stop_after_run"),
            "1 thread, no spin": session_options(threads=1, spin="never"),
        })
    return sets


def engines_with(compiled, options: ort.SessionOptions | None) -> dict[EngineModule, OnnxRuntimeEngine]:
    """A new engine for every engine of ``compiled``, built with ``options`` (None: the engine's defaults)."""
    engines = {}
    for module in compiled.graph_module.children():
        if isinstance(module, EngineModule):
            model = onnx.load_from_string(compiled.conversion.onnx_models[module.segment_index])
            engines[module] = OnnxRuntimeEngine(model, module.engine.inputs, module.engine.outputs, options=options)
    return engines


def install(engines: dict[EngineModule, OnnxRuntimeEngine]) -> None:
    for module, engine in engines.items():
        module.engine = engine


def interleaved(variants: dict[str, tuple], repeat: int, rounds: int, warmup: int = 3) -> dict[str, float]:
    """Median over rounds of each variant's median over ``repeat`` calls; variants alternate every round.

    A variant is ``(setup, fn)``: ``setup()`` (installing its engines) runs untimed before its calls.
    """
    for setup, fn in variants.values():
        setup()
        for _ in range(warmup):
            fn()
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (setup, fn) in variants.items():
            setup()
            per_round[name].append(median_seconds(fn, repeat, warmup=0))
    return {name: statistics.median(values) for name, values in per_round.items()}


def bench_model(name: str, option_sets_: dict[str, ort.SessionOptions | None], repeat: int, rounds: int) -> None:
    model, inputs = models.get(name).build()
    single = trtcheck.compile(model, inputs, backend="onnxruntime")
    many = trtcheck.compile(model, inputs, MANY, backend="onnxruntime")
    # Engines for every option set, installed into the two compiled modules before each variant is timed.
    engines = {(kind, label): engines_with(compiled, options)
               for label, options in option_sets_.items() for kind, compiled in (("1 engine", single), ("many", many))}
    nothing = lambda: None  # noqa: E731
    variants = {"eager": (nothing, lambda: model(*inputs))}
    for (kind, label), built in engines.items():
        compiled = single if kind == "1 engine" else many
        variants[f"{kind} | {label}"] = ((lambda b: lambda: install(b))(built), (lambda m: lambda: m(*inputs))(compiled))
    with torch.inference_mode():
        times = interleaved(variants, repeat, rounds)
        profiles = {}
        for label in option_sets_:
            install(engines[("many", label)])
            profiles[label] = profile(many, inputs, repeat=repeat)
    first = next(iter(option_sets_))
    print(f"\n{name}: {len(many.partition.segments)} segments ({len(many.engines)} engines), "
          f"{profiles[first].boundaries} values crossing per call; eager {times['eager'] * 1e3:.2f} ms")
    print(f"  {'options':22s} {'1 engine ms':>11s} {'many ms':>8s} {'many/eager':>10s} {'1eng/eager':>10s} "
          f"| profile of many: {'total':>7s} {'engines':>7s} {'torch':>7s} {'bound.':>7s} {'us/bound.':>9s}")
    for label in option_sets_:
        p = profiles[label]
        one, lots = times[f"1 engine | {label}"], times[f"many | {label}"]
        print(f"  {label:22s} {one * 1e3:11.2f} {lots * 1e3:8.2f} {lots / times['eager']:10.2f} {one / times['eager']:10.2f} "
              f"| {'':16s} {p.total_s * 1e3:7.2f} {p.engine_s * 1e3:7.2f} {p.torch_s * 1e3:7.2f} {p.boundary_s * 1e3:7.2f} "
              f"{p.per_boundary_s * 1e6:9.1f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v3_small"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--options", action="store_true", help="compare more ONNX Runtime thread settings")
    parser.add_argument("--global-pool", action="store_true", help=argparse.SUPPRESS)  # --options runs it in a child
    parser.add_argument("--keep-denormals", action="store_true")
    args = parser.parse_args(argv)
    if args.global_pool:  # before any session exists: global pools are configured once per process
        ort.set_global_thread_pool_sizes(default_threads(), 1)
        ort.set_default_logger_severity(3)  # each session warns that its own pool sizes are ignored
    torch.set_flush_denormal(not args.keep_denormals)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if not args.global_pool:
        print(f"torch threads: {torch.get_num_threads()}, engine threads: {default_threads()}, cores: {os.cpu_count()}, "
              f"load average: {load:.2f}, onnxruntime {ort.__version__}, denormals flushed: {not args.keep_denormals}")
    for model in args.models:
        bench_model(model, option_sets(args.options, args.global_pool), args.repeat, args.rounds)
        if args.options:  # global pools exclude per-session pools in one process: measured in a child process
            command = [sys.executable, __file__, "--global-pool", "--models", model, "--repeat", str(args.repeat),
                       "--rounds", str(args.rounds)] + (["--keep-denormals"] if args.keep_denormals else [])
            subprocess.run(command, check=False)


if __name__ == "__main__":
    main()
