"""What one boundary of a stitched module costs, against the size of the tensors crossing it (issue 42, part 3).

    python -m suites.benchmarks.bench_boundary [--shapes 1x8 1x64x8x8 1x64x28x28 1x64x56x56 1x64x112x112]
                                               [--repeat 30] [--profiles 3] [--threads N]

The gate's boundary chain (``gate.boundary_chain``: 16 ``add`` engines, each followed by a ``relu`` forced to
PyTorch, 32 values crossing per call) compiled for each shape, and ``trtcheck.profile``'s split of one call:
engines (inside ONNX Runtime's runs), Torch segments, and what remains, the crossings, per value crossing (and eager's
median call of the same chain: its adds and relus, PyTorch on the caller's threads). The
code between the segments is the same at every shape (one engine call, its input check, binding, output
allocation and ``getitem``; the stitched module's generated code; the profile's marks), so a per-boundary cost
that grows with the shape is not more of trtcheck's work but the same work done slower: after an engine or a
Torch op has streamed that many bytes through the core's caches. The gate judges the smallest shape; the zoo's
many-segment modules (``bench_segments``) cross tensors of hundreds of KiB to MiB.

Of ``--profiles`` profiles of ``--repeat`` calls each (every profile the call with the median total), the one with the
median cost per boundary is printed. ``--threads N`` sets PyTorch's thread count for the run (``torch.set_num_threads``),
which eager runs on and engines take as their own (``OnnxRuntimeEngine``'s default): with 1, every op of both runs on
the calling core, a check of what splitting the work between two thread pools costs. A benchmark, not a test: it
prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
import warnings

import torch

import trtcheck
from suites.benchmarks import gate
from trtcheck.benchmarking import flush_denormals

SHAPES = ((1, 8), (1, 64, 8, 8), (1, 64, 28, 28), (1, 64, 56, 56), (1, 64, 112, 112))


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(size) for size in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: write its sizes joined by 'x', as 1x64x56x56") from None
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape: every size must be at least 1, as in 1x64x56x56")
    return shape


def measure(
    shapes: tuple[tuple[int, ...], ...] = SHAPES, repeat: int = 30, profiles: int = 3
) -> list[tuple[tuple[int, ...], trtcheck.Profile]]:
    """Per shape, the profile (of ``profiles``) with the median cost per boundary; printed as it goes."""
    warnings.filterwarnings("ignore")
    results = []
    for shape in shapes:
        model, compiled = gate.boundary_chain(shape)  # before flushing: creating an ONNX Runtime session unflushes
        x = torch.rand(shape)
        with flush_denormals():  # and back as it was after: the flag is the thread's, and outlives this call
            eager = _eager_seconds(model, x, repeat)
            runs = sorted((trtcheck.profile(compiled, x, repeat=repeat, warmup=5) for _ in range(profiles)),
                          key=lambda profile: profile.per_boundary_s)
        chosen = runs[(len(runs) - 1) // 2]
        results.append((shape, chosen))
        kib = math.prod(shape) * 4 / 1024
        print(f"{'x'.join(map(str, shape)):>14s} {kib:8.1f} KiB: total {chosen.total_s * 1e3:7.3f} ms = engines "
              f"{chosen.engine_s * 1e3:7.3f} + torch {chosen.torch_s * 1e3:7.3f} + crossings {chosen.boundary_s * 1e3:6.3f} ms "
              f"({chosen.boundaries} values, {chosen.per_boundary_s * 1e6:5.1f} us each); eager {eager * 1e3:7.3f} ms", flush=True)
    return results


def _eager_seconds(model: torch.nn.Module, x: torch.Tensor, repeat: int) -> float:
    """The median of ``repeat`` eager calls (after five), as ``trtcheck.profile`` calls the compiled module."""
    times = []
    with torch.inference_mode():
        for index in range(repeat + 5):
            start = time.perf_counter()
            model(x)
            if index >= 5:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=_shape, nargs="+", default=list(SHAPES), help="float32 shapes, as 1x64x56x56")
    parser.add_argument("--repeat", type=int, default=30, help="calls per profile")
    parser.add_argument("--profiles", type=int, default=3, help="profiles per shape (the median one is printed)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads first: eager's threads and the engines'")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    try:  # the caller's thread count back afterwards (a test session goes on in this process)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        print(f"cores: {os.cpu_count()}, torch threads: {torch.get_num_threads()}, load average: {os.getloadavg()[0]:.2f}",
              flush=True)
        measure(tuple(args.shapes), args.repeat, args.profiles)
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
