"""Stitched modules against eager PyTorch and one whole-model ONNX Runtime session, in one run.

    python -m suites.benchmarks.bench_compile [--models resnet18 mobilenet_v3_small] [--repeat 20]

Prints, per model: median latency of eager, of the stitched module (default settings, ONNX Runtime
backend) and of one ONNX Runtime session over the whole model's ONNX (trtcheck's converters, all nodes in
one segment), and the stitched/whole ratio (target: within 1.05x when the model is fully convertible).
Then the overhead of one extra TensorRT/Torch boundary (target < 30 us), measured on a chain of cheap ops
on a tiny tensor split into k engines, and the time to convert a 50-node segment (target < 50 ms).
A benchmark, not a test: it prints ratios measured in one run and asserts nothing.

Denormal floats are flushed to zero (``torch.set_flush_denormal(True)``) unless ``--keep-denormals``: the
random-weight torchvision models produce denormal activations, which make eager PyTorch on x86 CPUs about
50x slower (measured: resnet18 930 ms vs 17 ms) while ONNX Runtime is unaffected; comparing that would
measure the CPU's denormal handling, not partitioning.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

import trtcheck
import trtcheck_zoo as models
from trtcheck.conversion import segment_to_onnx
from trtcheck.engines import TensorSpec, build_engine
from trtcheck.partitioning.extract import segment_module
from trtcheck.shapes import segment_shapes


def median_seconds(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v3_small"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep-denormals", action="store_true")
    args = parser.parse_args(argv)
    torch.set_flush_denormal(not args.keep_denormals)
    print(f"torch threads: {torch.get_num_threads()}, denormals flushed: {not args.keep_denormals}")
    compare_models(args.models, args.repeat)
    boundary_overhead(args.repeat)
    conversion_time(args.repeat)


if __name__ == "__main__":
    main()
