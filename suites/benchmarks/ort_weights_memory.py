"""Memory an ONNX Runtime session keeps for one converted segment's weights, handed over two ways.

    python -m suites.benchmarks.ort_weights_memory [--model bert_base] [--how memory file]

Each way in a fresh process: the model (any zoo name, or ``bert_base``, see ``bench_compile``) is converted by
``trtcheck`` (one segment at the default settings), then the RSS above that point is printed after building one
CPU session of its first segment:

* ``memory``: what ``trtcheck.compile`` does (``build_engines``): the weight-free model, its weights as
  in-memory external initializers;
* ``file``: what ``torch.onnx.export`` hands ONNX Runtime: the model saved with every weight in an external-data
  file, the session opened by path.

Measured (issue 25, bert_base, 417 MiB of weights, quiet machine): memory +527 MiB kept (peak +583); file +373 MiB
kept (peak +545, most of it the full in-memory model this script builds to save it). A benchmark: it prints,
asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import tempfile

HOWS = ("memory", "file")


def child(name: str, how: str) -> None:
    import onnx
    import onnxruntime as ort
    import torch

    from suites.benchmarks.bench_compile import build_model, reset_peak, rss_kib
    from trtcheck.build.clock import Clock
    from trtcheck.build.convert import OnnxModels, convert
    from trtcheck.build.engine_build import build_engines
    from trtcheck.lowering.symbols import symbol_ranges

    torch.set_flush_denormal(True)
    model, inputs, dynamic_shapes = build_model(name)
    conversion = convert(model, inputs, None, clock=Clock(), dynamic_shapes=dynamic_shapes)
    index = min(conversion.onnx_models)
    segment = conversion.onnx_models.segment(index)
    gc.collect()
    reset_peak()
    before = rss_kib()
    with tempfile.TemporaryDirectory() as folder:
        if how == "file":
            path = os.path.join(folder, "segment.onnx")
            onnx.save(segment.full(), path, save_as_external_data=True, all_tensors_to_one_file=True,
                      location="segment.onnx.data", size_threshold=1024)
            gc.collect()
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        else:  # compile's own engine build, on this segment alone
            only = OnnxModels({index: segment})
            session = build_engines(conversion.partition, only, {}, "onnxruntime", Clock(), symbol_ranges(conversion.graph_module))
        kept = (rss_kib() - before) / 1024
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        del session
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
