"""Detectors under torch.compile: verify's and compile's time, and the deployed model against eager, with what dynamo's
guards and graph breaks cost split from what the compiled graphs cost.

    python -m suites.benchmarks.bench_detection [--models detection_fasterrcnn_mobilenet_v3_320] [--calls 20]
                                                [--skip-verify]

For each detection zoo entry (``trtcheck_zoo``'s ``detection_*``, torch.export refuses them all): ``verify``'s wall
time (default settings, ONNX Runtime), ``compile``'s (``trtcheck.compile``: the deployed ``DynamoModule``, every
captured graph compiled), then the median call of three modules on the example: eager PyTorch; the model under
``torch.compile`` with every graph run as dynamo captured it (dynamo's guards, graph breaks and Python between
graphs, no engine: ``dynamo eager``); and the deployed model, whose calls are split into the time inside its
compiled graphs (the backend's calls, timed) and the rest. Denormals are flushed while timing. A benchmark, not a
test: it prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import torch

import trtcheck
import trtcheck_zoo as zoo
from suites.benchmarks.bench_quantized import median_call
from trtcheck.benchmarking import flush_denormals
from trtcheck.dynamo.capture import fresh_dynamo

DEFAULT_MODELS = "detection_fasterrcnn_mobilenet_v3_320"


def inside_graphs(deployed: Any, inputs: tuple, calls: int) -> float:
    """The median over ``calls`` calls of the seconds the deployed model spent inside its compiled graphs per call
    (the backend's recording, times only)."""
    totals = []
    with torch.no_grad():
        for _ in range(calls):
            with deployed.backend.recording(copies=False) as recorded:
                deployed(*inputs)
            totals.append(sum(call.seconds for call in recorded))
    return statistics.median(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--skip-verify", action="store_true")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    for name in args.models.split(","):
        model, inputs = zoo.get(name).build()
        line = [name]
        if not args.skip_verify:
            start = time.perf_counter()
            entry = zoo.get(name)
            report = trtcheck.verify(model, inputs, backend="onnxruntime", inputs=entry.input_sets() if entry.input_sets else None)
            line.append(f"verify {time.perf_counter() - start:.1f} s ({len(report.capture.graphs)} graphs, "
                        f"{len(report.capture.breaks)} breaks)")
        start = time.perf_counter()
        deployed = trtcheck.compile(model, inputs, backend="onnxruntime", frontend="compile")
        line.append(f"compile {time.perf_counter() - start:.1f} s")
        with flush_denormals():
            eager = median_call(model, inputs, args.calls)
            with fresh_dynamo():
                dynamo_eager = median_call(torch.compile(model, backend=lambda gm, _: gm.forward), inputs, args.calls)
            deployed = trtcheck.compile(model, inputs, backend="onnxruntime", frontend="compile")  # dynamo reset above
            whole = median_call(deployed, inputs, args.calls)
            graphs = inside_graphs(deployed, inputs, args.calls)
        line.append(f"eager {eager * 1e3:.1f} ms, dynamo eager {dynamo_eager * 1e3:.1f} ms (guards and breaks "
                    f"{(dynamo_eager - eager) * 1e3:+.1f} ms), deployed {whole * 1e3:.1f} ms: {graphs * 1e3:.1f} ms in "
                    f"compiled graphs, {(whole - graphs) * 1e3:.1f} ms outside them")
        print("; ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
