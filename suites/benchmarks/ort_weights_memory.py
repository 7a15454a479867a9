"""Memory an ONNX Runtime session keeps for one converted segment's weights, handed over two ways.

    python -m suites.benchmarks.ort_weights_memory [--model bert_base] [--how memory file]

Each way in a fresh process: the model (any zoo name, or ``bert_base``, see ``bench_compile``) is converted by
``trtcheck`` (one segment at the default settings), then the RSS above that point is printed after compile's own
engine build (``build_engines``) of its first segment, its weights handed over one way or the other whatever
their size (``trtcheck.engines.onnxruntime.WEIGHTS_FILE_BYTES`` set to match):

* ``memory``: the weight-free model, its weights as in-memory external initializers;
* ``file``: the model and an external-data file written from the weights' memory into a temporary folder, the
  session opened by path (as ``torch.onnx.export``'s model is): what compile does from 1 MiB of weights on.

Measured (issue 25, bert_base, 417 MiB of weights, quiet machine): before the file way existed, in memory +527 MiB
kept (peak +583) against +373 MiB kept for ``onnx.save(..., save_as_external_data=True)`` opened by path. A
benchmark: it prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys

HOWS = ("memory", "file")


def child(name: str, how: str) -> None:
    import torch

    from suites.benchmarks.bench_compile import build_model, reset_peak, rss_kib
    from trtcheck.compiler.clock import Clock
    from trtcheck.compiler.convert import OnnxModels, convert
    from trtcheck.compiler.engine_build import build_engines
    from trtcheck.engines import onnxruntime as onnxruntime_engine
    from trtcheck.lowering.symbols import symbol_ranges

    torch.set_flush_denormal(True)
    model, inputs, dynamic_shapes = build_model(name)
    conversion = convert(model, inputs, None, clock=Clock(), dynamic_shapes=dynamic_shapes)
    index = min(conversion.onnx_models)
    segment = conversion.onnx_models.segment(index)
    gc.collect()
    reset_peak()
    before = rss_kib()
    onnxruntime_engine.WEIGHTS_FILE_BYTES = 0 if how == "file" else sys.maxsize
    only = OnnxModels({index: segment})
    engines = build_engines(conversion.partition, only, {}, "onnxruntime", Clock(), symbol_ranges(conversion.graph_module))
    kept = (rss_kib() - before) / 1024
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    del engines
    weights = sum(t.numel() * t.element_size() for t in segment.weights.values()) / 2**20
    print(f"{name} {how:6s}: session keeps +{kept:.0f} MiB, peak +{peak:.0f} MiB (weights {weights:.0f} MiB)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert_base")
    parser.add_argument("--how", nargs="+", choices=HOWS, default=list(HOWS))
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "HOW"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return
    for how in args.how:
        done = subprocess.run([sys.executable, "-m", "suites.benchmarks.ort_weights_memory", "--child", args.model, how],
                              capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if "session keeps" in line]
        print(lines[-1] if lines else f"{args.model} {how}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


if __name__ == "__main__":
    main()
