"""Partitions recorded before issue 42's optimizations, and the cases they were recorded on.

Issue 42 made partitioning linear again (a linear in-place order, rounds that redo only what changed). Its
rule: no partition may change. ``naive`` and ``dependency_aware`` must give the very segments and reasons they
gave at 4345836 (the code before the optimizations), and ``optimal`` no more TensorRT engines, staying at the
lower bound wherever it reached it. This module names the cases (random graphs of both benchmark families,
several dtypes and with in-place writes, dynamic-shape graphs, and zoo models), fingerprints a partition, and
writes the recordings; ``test_recorded_partitions.py`` compares today's partitions against them.

    python -m suites.partitioning.recorded [--zoo] [--out FILE]

regenerates a recording with whatever code is on ``PYTHONPATH`` (the recordings in ``data/`` were made with
4345836's, except ten zoo entries whose lowered graphs lost their weight-only nodes when lowering began to fold
constants: swin_t and the hf_* models but hf_roberta, hf_vit, hf_convnext and hf_segformer, recorded again with the
partitioning code of that change, which gave every other entry its recorded partition). A partition's fingerprint
is a hash of every segment's target and node names and every node's reason, over the partition and its branches, so
two partitions match only when they agree on all of it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import trtcheck
from trtcheck.testing.random_graphs import (
    DYNAMIC_OPS,
    OPS,
    TENSOR_ONLY,
    build_dynamic_graph,
    build_graph,
    random_recipe,
    supports_all_but,
)

DATA = Path(__file__).parent / "data"
RANDOM_RECORDING = DATA / "partitions_4345836.json"
ZOO_RECORDING = DATA / "zoo_partitions_4345836.json"

FAMILIES = {"tensor": TENSOR_ONLY, "with-ints": tuple(OPS)}

# The settings every case is partitioned with: each segmentation at min_block_size 1 and 5 (where the block-size
# cascade runs), plus 3, and a forced op (a Torch run in the middle of TensorRT ones).
SETTINGS: dict[str, trtcheck.Settings] = {
    "naive mbs1": trtcheck.Settings(min_block_size=1, segmentation="naive"),
    "naive mbs5": trtcheck.Settings(min_block_size=5, segmentation="naive"),
    "dependency_aware mbs1": trtcheck.Settings(min_block_size=1),
    "dependency_aware mbs3": trtcheck.Settings(min_block_size=3),
    "dependency_aware mbs5": trtcheck.Settings(min_block_size=5),
    "dependency_aware mbs3 relu forced": trtcheck.Settings(min_block_size=3, torch_executed_ops=["aten::relu"]),
    "optimal mbs1": trtcheck.Settings(min_block_size=1, segmentation="optimal"),
    "optimal mbs5": trtcheck.Settings(min_block_size=5, segmentation="optimal"),
}


@dataclass(frozen=True)
class Case:
    """One graph to partition: how to build it (a GraphModule, its example inputs, the ``support``) and whether it is
    a lowering's own graph (``owned``: partitioned as ``trtcheck.partition`` partitions what it lowered, a copy per
    setting through ``partition_graph``) or a user's GraphModule (``trtcheck.partition`` itself)."""

    name: str
    build: Callable[[], tuple[Any, tuple, dict]]
    owned: bool = False
    slow: bool = False  # seconds to build (a larger graph, or torch.export): the slow tier's


def _random(family: str, size: int, seed: int, dtype: torch.dtype = torch.float32, slow: bool = False) -> Case:
    def build() -> tuple[Any, tuple, dict]:
        graph = build_graph(random_recipe(size, 0.1, seed, FAMILIES[family]), seed=seed, dtype=dtype)
        return graph.graph_module, graph.example_inputs, {"support": supports_all_but()}

    return Case(f"{family} {size} seed {seed} {str(dtype).removeprefix('torch.')}", build, slow=slow)


def _dynamic(size: int, seed: int, slow: bool = False) -> Case:
    def build() -> tuple[Any, tuple, dict]:
        graph = build_dynamic_graph(random_recipe(size, 0.1, seed, tuple(DYNAMIC_OPS)), seed=seed)
        return graph.lower(), graph.example_inputs, {"support": supports_all_but()}

    return Case(f"dynamic {size} seed {seed}", build, owned=True, slow=slow)


def random_cases() -> list[Case]:
    """Random graphs of both benchmark families (in-place writes and int producers in ``with-ints``), four dtypes,
    and dynamic-shape graphs (torch.export's SymInt flows); the ``slow`` ones take seconds each to build."""
    cases = [_random(family, size, seed) for family in FAMILIES for size, seeds in ((60, range(6)), (400, range(3))) for seed in seeds]
    cases += [_random("with-ints", 1500, 0, slow=True), _random("tensor", 1500, 0, slow=True)]
    cases += [_random("with-ints", 200, seed, dtype) for seed, dtype in ((1, torch.float16), (2, torch.int64), (3, torch.bfloat16))]
    cases += [_dynamic(30, 0)] + [_dynamic(size, seed, slow=True) for size, seed in ((60, 1), (120, 2))]
    return cases


def zoo_cases() -> list[Case]:
    """Every zoo model but the heavy ones, with trtcheck's own converter registry (the slow tier's cases)."""
    import trtcheck_zoo as models

    def case(name: str) -> Case:
        def build() -> tuple[Any, tuple, dict]:
            entry = models.get(name)
            model, inputs = entry.build()
            return trtcheck.lower(model, inputs, dynamic_shapes=entry.dynamic_shapes), inputs, {}

        return Case(f"zoo {name}", build, owned=True)

    # a detector is never one lowered graph (torch.export refuses it): its graphs are the matrix's and test_validator_errors'
    return [case(name) for name in models.names(exclude_tags=["heavy", "detection"])]


RENAMED = {"(Partition.branches)": "(Partition.subpartitions)"}
"""Words a reason says differently since the recordings were made, mapped back to the recorded words: the reason is the
same, its wording follows the vocabulary (one word per thing: ``Partition.branches`` at 7f1b2ce)."""


def _recorded_words(reason: str) -> str:
    for now, then in RENAMED.items():
        reason = reason.replace(now, then)
    return reason


def fingerprint(partition: trtcheck.Partition) -> str:
    """A hash of every segment's target and nodes and every node's reason, over the partition and its branches."""
    parts = []
    for path, part in partition.walk():
        segments = [[segment.target.value, segment.do_not_merge, [node.name for node in segment.nodes]] for segment in part.segments]
        reasons = sorted((node.name, _recorded_words(str(reason))) for node, reason in part.reasons.items())
        parts.append([path, segments, reasons])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def shape(partition: trtcheck.Partition) -> dict[str, int]:
    """Segments and engines over the partition and its branches, and how far the top level is from its lower bound."""
    from trtcheck.partitioning.optimal import lower_bound

    segments = sum(len(part.segments) for _, part in partition.walk())
    engines = sum(len(part.segments_of(trtcheck.Target.TENSORRT)) for _, part in partition.walk())
    targets = {node: segment.target for segment in partition.segments for node in segment.nodes}
    bound = lower_bound([node for segment in partition.segments for node in segment.nodes], targets) if targets else 0
    return {"segments": segments, "engines": engines, "above_bound": len(partition.segments) - bound}


def record(case: Case, model: Any = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(setting label, recorded figures)`` for every setting of ``SETTINGS``, a ``"error"`` where it raised."""
    from trtcheck.lowering.graph import copy_graph_module
    from trtcheck.partitioning import partition_graph

    model, inputs, kwargs = case.build() if model is None else model
    for label, settings in SETTINGS.items():
        try:
            if case.owned:
                partition = partition_graph(copy_graph_module(model), settings, kwargs.get("support"))
            else:
                partition = trtcheck.partition(model, inputs, settings, **kwargs)
        except trtcheck.TrtcheckError as error:
            yield label, {"error": type(error).__name__}
            continue
        yield label, {"fingerprint": fingerprint(partition), "summary": partition.summary(), **shape(partition)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", action="store_true", help="the zoo cases instead of the random graphs")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or (ZOO_RECORDING if args.zoo else RANDOM_RECORDING)
    results: dict[str, dict[str, Any]] = {}
    for case in zoo_cases() if args.zoo else random_cases():
        try:
            results[case.name] = dict(record(case))
        except Exception as error:  # noqa: BLE001 - a case that cannot even be built is recorded as such
            results[case.name] = {"build": f"{type(error).__name__}: {error}"[:200]}
        print(case.name, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
