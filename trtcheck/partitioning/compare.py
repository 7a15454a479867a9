"""Partition one graph with every partitioner at hand, on the same support: segments, engines, bytes, time.

Why: "fewest engines" is a claim about trtcheck's strategies *and* the partitioners people would use
instead. ``compare`` runs, from the same decisions (a node may go to TensorRT iff trtcheck's decisions
say so: its converter accepts it, and neither ``torch_executed_ops`` nor ``torch_executed_modules``
forces it to PyTorch; ``getitem`` follows the tuple it indexes):

* trtcheck's ``naive``, ``dependency_aware`` and ``optimal`` segmentations (``partition_graph``, with every
  rule: Tensor-only boundaries, ``min_block_size``);
* torch.fx's ``CapabilityBasedPartitioner`` (``allows_single_node_partition=True``; it knows no
  ``min_block_size`` and no Tensor-only rule). Its engines are its partitions; its segments are those
  engines plus the runs of PyTorch nodes between them in the graph ``fuse_partitions`` makes (torch.fx
  leaves PyTorch nodes in that order; it does not regroup them);
* torch.fx's ``_SplitterBase`` (``put_nodes_into_subgraphs``, then ``remove_small_acc_subgraphs`` with
  ``min_acc_module_size=min_block_size``; its own acc-node finder drops nodes with non-Tensor inputs or
  outputs). It runs ``ShapeProp``, so it needs example inputs that run the graph;
* Torch-TensorRT's partitioners, only where ``torch_tensorrt`` imports (not installed here: a row with a
  note, left out of the tallies).

Bytes are ``optimal.boundary_bytes`` (what ``benchmarking.boundary_traffic`` reports). Times are one run's
wall time of the partitioning call alone (graph copies excluded), so small graphs are noisy.

    python -m trtcheck.partitioning.compare --zoo [PRESET ...] --random 500 --seed 0
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.lowering import copy_graph_module
from trtcheck.partitioning.decisions import Support, decide, follow_producers, is_getitem, support_function
from trtcheck.partitioning.optimal import boundary_bytes, lower_bound
from trtcheck.partitioning.partition import Segment, Target, is_compute
from trtcheck.partitioning.partitioner import partition_graph
from trtcheck.settings import ModuleMatcher, Settings, resolve_modules, resolve_ops

TRTCHECK_STRATEGIES = ("naive", "dependency_aware", "optimal")
FX_STRATEGIES = ("capability_based", "splitter_base")
STRATEGIES = (*TRTCHECK_STRATEGIES, *FX_STRATEGIES, "torch_tensorrt")


@dataclass(frozen=True)
class Row:
    """One strategy on one graph; ``segments`` is None when the strategy did not run (see ``note``)."""

    graph: str
    preset: str
    strategy: str
    segments: int | None
    engines: int | None
    boundary_bytes: int | None
    seconds: float | None
    note: str = ""
    lower_bound: int | None = None  # fewest segments any order allows for the *initial* targets


def compare(
    graph_module: torch.fx.GraphModule,
    example_inputs: Sequence[Any] = (),
    settings: Settings | None = None,
    support: Support = None,
    *,
    name: str = "graph",
    preset: str = "",
    strategies: Iterable[str] = STRATEGIES,
    forced_modules: ModuleMatcher | None = None,
) -> list[Row]:
    """One ``Row`` per strategy for ``graph_module`` (never changed: each strategy works on a copy).

    ``example_inputs`` are the graph's flat placeholder values; only ``splitter_base`` runs the graph
    (``ShapeProp``), and without inputs it is skipped with a note. ``forced_modules`` is
    ``resolve_modules(settings.torch_executed_modules, graph, model)`` when module names need the model.
    """
    settings = Settings.coerce(settings)
    if forced_modules is None:
        forced_modules = resolve_modules(settings.torch_executed_modules, graph_module.graph)
    allowed = _initial_targets(graph_module, settings, support, forced_modules)
    nodes = [node for node in graph_module.graph.nodes if is_compute(node)]
    bound = lower_bound(nodes, allowed)
    rows = []
    for strategy in strategies:
        if strategy in TRTCHECK_STRATEGIES:
            row = _trtcheck(graph_module, settings, support, forced_modules, strategy)
        elif strategy == "capability_based":
            row = _capability_based(graph_module, allowed)
        elif strategy == "splitter_base":
            row = _splitter_base(graph_module, example_inputs, allowed, settings.min_block_size)
        elif strategy == "torch_tensorrt":
            row = _torch_tensorrt()
        else:
            raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
        rows.append(dataclasses.replace(row, graph=name, preset=preset, strategy=strategy, lower_bound=bound))
    return rows


def _initial_targets(
    gm: torch.fx.GraphModule, settings: Settings, support: Support, forced_modules: ModuleMatcher
) -> dict[torch.fx.Node, Target]:
    supports, forced_ops = support_function(support), resolve_ops(settings.torch_executed_ops)
    nodes = [node for node in gm.graph.nodes if is_compute(node)]
    targets: dict[torch.fx.Node, Target] = {}
    reasons: dict = {}
    for node in nodes:
        if not is_getitem(node):
            targets[node], reasons[node] = decide(node, supports, forced_ops, forced_modules)
    follow_producers(nodes, targets, reasons)
    return targets


def _blank(**values: Any) -> Row:
    return Row("", "", "", **{"segments": None, "engines": None, "boundary_bytes": None, "seconds": None, **values})


def _trtcheck(gm: torch.fx.GraphModule, settings: Settings, support: Support, forced_modules: ModuleMatcher, strategy: str) -> Row:
    copy = copy_graph_module(gm)
    start = time.perf_counter()
    result = partition_graph(copy, dataclasses.replace(settings, segmentation=strategy), support, forced_modules=forced_modules)
    seconds = time.perf_counter() - start
    engines = len(result.segments_of(Target.TENSORRT))
    return _blank(segments=len(result.segments), engines=engines, boundary_bytes=boundary_bytes(result.segments), seconds=seconds)


class _Allowed:
    """torch.fx's ``OperatorSupportBase`` protocol over trtcheck's initial decisions, by node name (the
    partitioners may see a copy of the graph)."""

    def __init__(self, allowed: Mapping[torch.fx.Node, Target]) -> None:
        self.names = {node.name for node, target in allowed.items() if target is Target.TENSORRT}

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node.name in self.names


def _capability_based(gm: torch.fx.GraphModule, allowed: Mapping[torch.fx.Node, Target]) -> Row:
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    copy = copy_graph_module(gm)
    start = time.perf_counter()
    partitioner = CapabilityBasedPartitioner(copy, _Allowed(allowed), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    seconds = time.perf_counter() - start
    members = [{node.name for node in partition.nodes} for partition in partitions]
    original = {node.name: node for node in gm.graph.nodes}
    fused = partitioner.fuse_partitions(partitions)
    segments: list[Segment] = []
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("fused_"):
            index = int(node.target.removeprefix("fused_"))
            inside = [n for n in gm.graph.nodes if n.name in members[index]]
            segments.append(Segment(Target.TENSORRT, inside))
        elif is_compute(node) and node.name in original and not any(node.name in m for m in members):
            if not segments or segments[-1].target is not Target.TORCH:
                segments.append(Segment(Target.TORCH))
            segments[-1].nodes.append(original[node.name])
    return _blank(segments=len(segments), engines=len(partitions), boundary_bytes=boundary_bytes(segments), seconds=seconds)


def _splitter_base(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], allowed: Mapping[torch.fx.Node, Target], min_block_size: int
) -> Row:
    if not example_inputs and any(node.op == "placeholder" for node in gm.graph.nodes):
        return _blank(note="skipped: _SplitterBase runs the graph (ShapeProp) and no example inputs were given")
    from torch.fx.passes.splitter_base import _SplitterBase, _SplitterSettingBase

    argv, sys.argv = sys.argv, sys.argv[:1]  # _SplitterSettingBase parses sys.argv
    try:
        splitter_settings = _SplitterSettingBase(min_acc_module_size=min_block_size)
    finally:
        sys.argv = argv
    copy = copy_graph_module(gm)
    with contextlib.redirect_stdout(io.StringIO()):  # remove_small_acc_subgraphs prints each removal
        start = time.perf_counter()
        splitter = _SplitterBase(copy, tuple(example_inputs), _Allowed(allowed), splitter_settings)
        subgraphs = splitter.remove_small_acc_subgraphs(splitter.put_nodes_into_subgraphs())
        seconds = time.perf_counter() - start
    original = {node.name: node for node in gm.graph.nodes}
    segments: list[Segment] = []
    for subgraph in subgraphs:
        target = Target.TENSORRT if subgraph.is_acc else Target.TORCH
        nodes = [original[node.name] for node in subgraph.nodes if node.name in original]
        if segments and segments[-1].target is target:
            segments[-1].nodes.extend(nodes)
        elif nodes:
            segments.append(Segment(target, nodes))
    engines = sum(1 for segment in segments if segment.target is Target.TENSORRT)
    return _blank(segments=len(segments), engines=engines, boundary_bytes=boundary_bytes(segments), seconds=seconds)


def _torch_tensorrt() -> Row:
    try:
        import torch_tensorrt  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure means "not here"
        return _blank(note=f"skipped: torch_tensorrt is not importable ({type(error).__name__})")
    # Its partitioners (fast and global) take a graph and its own settings object; wiring them is left
    # for a machine where it is installed, so that their behaviour can be checked, not guessed.
    return _blank(note="skipped: torch_tensorrt imports, but its partitioners are not wired into compare yet")


def format_rows(rows: Sequence[Row]) -> str:
    """A fixed-width table, one line per row."""
    header = f"{'graph':24s} {'preset':18s} {'strategy':18s} {'segs':>5s} {'bound':>5s} {'engines':>7s} {'bytes':>10s} {'ms':>9s}  note"
    lines = [header]
    for row in rows:
        def cell(value: Any, width: int) -> str:
            return f"{'-' if value is None else value:>{width}}"

        ms = None if row.seconds is None else f"{row.seconds * 1000:.2f}"
        lines.append(
            f"{row.graph[:24]:24s} {row.preset[:18]:18s} {row.strategy:18s} {cell(row.segments, 5)} "
            f"{cell(row.lower_bound, 5)} {cell(row.engines, 7)} {cell(row.boundary_bytes, 10)} {cell(ms, 9)}  {row.note}"
        )
    return "\n".join(lines)


Tally = dict[tuple[str, str, str], Counter]


def tally(rows: Iterable[Row]) -> Tally:
    """``{(strategy, peer, metric): Counter(worse=, equal=, better=)}`` over graphs, metric ``segments``
    or ``engines`` (fewer is better); rows that did not run are left out."""
    by_graph: dict[tuple[str, str], dict[str, Row]] = {}
    for row in rows:
        if row.segments is not None:
            by_graph.setdefault((row.graph, row.preset), {})[row.strategy] = row
    result: Tally = {}
    for strategies in by_graph.values():
        for strategy, row in strategies.items():
            for peer, other in strategies.items():
                if peer == strategy:
                    continue
                for metric in ("segments", "engines"):
                    mine, theirs = getattr(row, metric), getattr(other, metric)
                    verdict = "worse" if mine > theirs else "better" if mine < theirs else "equal"
                    result.setdefault((strategy, peer, metric), Counter())[verdict] += 1
    return result


def format_tally(result: Tally, strategies: Sequence[str] | None = None) -> str:
    """Per metric, a matrix: row strategy against column peer, cells ``worse/equal/better``."""
    names = list(strategies) if strategies else sorted({key[0] for key in result})
    lines = []
    for metric in ("segments", "engines"):
        lines.append(f"{metric}: row vs column, worse/equal/better (fewer is better)")
        lines.append(f"{'':18s}" + "".join(f"{peer:>20s}" for peer in names))
        for strategy in names:
            cells = []
            for peer in names:
                counts = result.get((strategy, peer, metric))
                text = "-" if counts is None else f"{counts['worse']}/{counts['equal']}/{counts['better']}"
                cells.append(f"{text:>20s}")
            lines.append(f"{strategy:18s}" + "".join(cells))
        lines.append("")
    return "\n".join(lines)


def lower_bound_hits(rows: Iterable[Row]) -> dict[str, tuple[int, int]]:
    """Per strategy, ``(graphs where segments == lower bound, graphs)``: meaningful where no rule moves
    nodes after the decisions (``min_block_size=1``, no non-Tensor value between targets)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        if row.segments is not None and row.lower_bound is not None:
            entry = counts.setdefault(row.strategy, [0, 0])
            entry[0] += row.segments == row.lower_bound
            entry[1] += 1
    return {strategy: (hit, total) for strategy, (hit, total) in counts.items()}


def random_graph(seed: int, min_nodes: int = 8, max_nodes: int = 80, ops: Sequence[str] | None = None):
    """A seeded random graph of ``min_nodes``..``max_nodes`` compute nodes, 10-40% of its recipe's steps
    without a converter (``trtcheck.strategies``; ``ops`` default: Tensor-only ops, so that no non-Tensor
    value meets a boundary)."""
    from trtcheck.strategies import TENSOR_ONLY, build_graph, random_recipe

    ops = TENSOR_ONLY if ops is None else ops
    rng = random.Random(seed)
    wanted, fraction = rng.randint(min_nodes, max_nodes), rng.uniform(0.1, 0.4)
    steps = max(1, wanted // 3)
    graph = None
    for _ in range(8):  # a step makes 1 to ~10 nodes: rescale the step count until the size fits
        graph = build_graph(random_recipe(steps, fraction, seed, ops), seed=seed)
        count = sum(1 for node in graph.graph_module.graph.nodes if is_compute(node))
        if min_nodes <= count <= max_nodes:
            return graph
        steps = max(1, round(steps * wanted / max(count, 1)))
    return graph


def _zoo_rows(model_names: Sequence[str], preset_names: Sequence[str], strategies: Sequence[str], log: Callable[[str], None]) -> list[Row]:
    import trtcheck_zoo
    from trtcheck.compiler import _flat_inputs
    from trtcheck.lowering import lower
    from trtcheck.presets import resolve_presets

    presets = resolve_presets(preset_names)
    rows: list[Row] = []
    for model_name in model_names:
        entry = trtcheck_zoo.get(model_name)
        model, example_inputs = entry.build()
        try:
            gm = lower(model, example_inputs)
        except Exception as error:  # noqa: BLE001 - one model that does not export is reported, not fatal
            log(f"{model_name}: skipped, lowering failed: {type(error).__name__}: {error}")
            continue
        flat = _flat_inputs(gm, example_inputs, None)
        for preset in presets:
            settings = preset.settings_for(entry.fallback_module)
            if settings is None:
                continue
            forced = resolve_modules(settings.torch_executed_modules, gm.graph, model)
            new = compare(gm, flat, settings, name=model_name, preset=preset.name, strategies=strategies, forced_modules=forced)
            rows += new
            log(format_rows(new).split("\n", 1)[1])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trtcheck.partitioning.compare``: the per-graph table, then worse/equal/better tallies."""
    parser = argparse.ArgumentParser(prog="python -m trtcheck.partitioning.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", nargs="*", metavar="PRESET", default=None,
                        help="run every zoo model under these presets (none given: the default presets)")
    parser.add_argument("--models", default="*", help="zoo names or globs, comma separated (default: all)")
    parser.add_argument("--random", type=int, default=0, metavar="N", help="also N random graphs (8-80 nodes, min_block_size 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first random graph")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma separated, of: " + ", ".join(STRATEGIES))
    parser.add_argument("--quiet", action="store_true", help="print the tallies only, not a line per graph")
    args = parser.parse_args(argv)
    strategies = [name for name in args.strategies.split(",") if name]
    unknown = [name for name in strategies if name not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    if args.zoo is None and not args.random:
        parser.error("nothing to compare: give --zoo [PRESET ...] and/or --random N")

    def log(text: str) -> None:
        if not args.quiet:
            print(text, flush=True)

    log(format_rows([]))
    sections: list[tuple[str, list[Row]]] = []
    if args.zoo is not None:
        import fnmatch

        import trtcheck_zoo
        from trtcheck.presets import DEFAULT_PRESETS

        patterns = [p.strip() for p in args.models.split(",") if p.strip()]
        model_names = [n for n in trtcheck_zoo.names() if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        sections.append(("zoo", _zoo_rows(model_names, args.zoo or list(DEFAULT_PRESETS), strategies, log)))
    if args.random:
        from trtcheck.strategies import supports_all_but

        rows: list[Row] = []
        settings = Settings(min_block_size=1)
        for seed in range(args.seed, args.seed + args.random):
            graph = random_graph(seed)
            new = compare(graph.graph_module, graph.example_inputs, settings, supports_all_but(),
                          name=f"random-{seed}", preset="min_block_size_1", strategies=strategies)
            rows += new
            log(format_rows(new).split("\n", 1)[1])
        sections.append((f"random graphs (seeds {args.seed}..{args.seed + args.random - 1})", rows))
    ran = [s for s in strategies if s != "torch_tensorrt"]
    for title, rows in sections:
        graphs = len({(row.graph, row.preset) for row in rows})
        print(f"\n== {title}: {graphs} graph/preset pairs ==")
        for note in sorted({row.note for row in rows if row.note}):
            print(f"note: {note}")
        print(format_tally(tally(rows), ran))
        hits = lower_bound_hits(rows)
        print("segments == lower bound of the initial targets: " + ", ".join(
            f"{name} {hit}/{total}" for name, (hit, total) in hits.items() if name in ran))
        timed = [row for row in rows if row.seconds is not None]
        print("median ms: " + ", ".join(
            f"{name} {_median([r.seconds for r in timed if r.strategy == name]) * 1000:.2f}" for name in ran))
    return 0


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else math.nan


if __name__ == "__main__":
    sys.exit(main())
