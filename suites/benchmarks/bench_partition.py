"""Partitioning speed on random core-ATen graphs: times at 1k, 10k and 100k nodes, and the scaling ratio.

    python suites/benchmarks/bench_partition.py [--sizes 1000 10000 100000] [--repeat 3]

Prints, per graph family and size, the best of ``--repeat`` runs of ``trtcheck.partition`` (default
settings: dependency-aware, min_block_size 5) on a graph with ~10% ops without a converter, and the
100k/10k time ratio (linear scaling gives ~10). Two families: ``tensor`` (Tensor-valued ops and tuple ops,
what core-ATen graphs of static-shape models contain) and ``with-ints`` (adds ``sym_size`` producers and
int consumers, which exercises the copy rule and therefore a copy of the user's graph).
A benchmark, not a test: these machines are shared and noisy, so it prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import trtcheck
from trtcheck.strategies import OPS, TENSOR_ONLY, build_graph, random_recipe, supports_all_but

FAMILIES = {"tensor": TENSOR_ONLY, "with-ints": tuple(OPS)}


def time_partition(num_nodes: int, ops, repeat: int, seed: int = 0) -> tuple[float, trtcheck.Partition]:
    """Best time to partition a random graph of about ``num_nodes`` compute nodes (steps may emit several)."""
    probe = build_graph(random_recipe(1000, 0.1, seed, ops))
    nodes_per_step = sum(1 for n in probe.graph_module.graph.nodes if n.op == "call_function") / 1000
    graph = build_graph(random_recipe(round(num_nodes / nodes_per_step), 0.1, seed, ops))
    support = supports_all_but()
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = trtcheck.partition(graph.graph_module, graph.example_inputs, trtcheck.Settings(), support)
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    for family, ops in FAMILIES.items():
        times = {}
        for size in args.sizes:
            seconds, result = time_partition(size, ops, args.repeat)
            times[size] = seconds
            nodes = len(result.compute_nodes)
            print(f"{family:10s} {nodes:>7,d} nodes: {seconds * 1000:9.1f} ms  ({result.summary()})", flush=True)
        if 10_000 in times and 100_000 in times:
            print(f"{family:10s} 100k/10k ratio: {times[100_000] / times[10_000]:.1f}", flush=True)


if __name__ == "__main__":
    main()
