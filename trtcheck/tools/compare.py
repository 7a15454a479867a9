"""Partition one graph with every partitioner at hand, on the same support: segments, engines, bytes, time.

Why: "fewest engines" is a claim about trtcheck's segmentations *and* the partitioners people would use
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

Bytes are ``partitioning.model.boundary_bytes`` (what the benchmarks record). Times are one run's
wall time of the partitioning call alone (graph copies excluded), so small graphs are noisy.

    trtcheck compare --zoo [PRESET ...] --random 500 --seed 0
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
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

import trtcheck_zoo
from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import copy_graph_module, flat_inputs
from trtcheck.names import ModuleMatcher, checked_settings, resolve_modules, resolve_ops
from trtcheck.partitioning.decisions import Support, initial_targets, support_check_of
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.nodes import is_compute
from trtcheck.partitioning.optimal import lower_bound
from trtcheck.partitioning.partition import Segment, boundary_bytes
from trtcheck.partitioning.reasons import Target
from trtcheck.presets import DEFAULT_PRESETS, resolve_presets
from trtcheck.settings import SEGMENTATIONS, Settings
from trtcheck.testing.random_graphs import TENSOR_ONLY, build_graph, random_recipe, supports_all_but

TRTCHECK_PARTITIONERS = SEGMENTATIONS
FX_PARTITIONERS = ("capability_based", "splitter_base")
PARTITIONERS = (*TRTCHECK_PARTITIONERS, *FX_PARTITIONERS, "torch_tensorrt")


@dataclass(frozen=True)
class Row:
    """One partitioner on one graph; ``segments`` is None when the partitioner did not run (see ``note``)."""

    graph: str
    preset: str
    partitioner: str
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
    partitioners: Iterable[str] = PARTITIONERS,
    forced_modules: ModuleMatcher | None = None,
) -> list[Row]:
    """One ``Row`` per partitioner for ``graph_module`` (never changed: each partitioner works on a copy).

    ``example_inputs`` are the graph's flat placeholder values; only ``splitter_base`` runs the graph
    (``ShapeProp``), and without inputs it is skipped with a note. ``forced_modules`` is
    ``resolve_modules(settings.torch_executed_modules, graph, model)`` when module names need the model.
    """
    settings = checked_settings(settings)
    if forced_modules is None:
        forced_modules = resolve_modules(settings.torch_executed_modules, graph_module.graph)
    allowed = _initial_targets(graph_module, settings, support, forced_modules)
    nodes = [node for node in graph_module.graph.nodes if is_compute(node)]
    bound = lower_bound(nodes, allowed)
    rows = []
    for partitioner in partitioners:
        if partitioner in TRTCHECK_PARTITIONERS:
            row = _trtcheck(graph_module, settings, support, forced_modules, partitioner)
        elif partitioner == "capability_based":
            row = _capability_based(graph_module, allowed)
        elif partitioner == "splitter_base":
            row = _splitter_base(graph_module, example_inputs, allowed, settings.min_block_size)
        elif partitioner == "torch_tensorrt":
            row = _torch_tensorrt()
        else:
            raise ValueError(f"unknown partitioner {partitioner!r}; known: {', '.join(PARTITIONERS)}")
        rows.append(dataclasses.replace(row, graph=name, preset=preset, partitioner=partitioner, lower_bound=bound))
    return rows


def _initial_targets(
    gm: torch.fx.GraphModule, settings: Settings, support: Support, forced_modules: ModuleMatcher
) -> dict[torch.fx.Node, Target]:
    nodes = [node for node in gm.graph.nodes if is_compute(node)]
    return initial_targets(nodes, support_check_of(support), resolve_ops(settings.torch_executed_ops), forced_modules)[0]


def _blank(**values: Any) -> Row:
    return Row("", "", "", **{"segments": None, "engines": None, "boundary_bytes": None, "seconds": None, **values})


def _trtcheck(gm: torch.fx.GraphModule, settings: Settings, support: Support, forced_modules: ModuleMatcher, partitioner: str) -> Row:
    copy = copy_graph_module(gm)
    start = time.perf_counter()
    result = partition_graph(copy, dataclasses.replace(settings, segmentation=partitioner), support, forced_modules=forced_modules)
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


def format_rows(rows: Sequence[Row], graph_width: int = 24, preset_width: int = 18) -> str:
    """A fixed-width table, one line per row. Names are never cut (a user's ``path/to/models.py:build_large``
    must stay readable): the columns widen to the longest name in ``rows``, or to the widths given (a caller
    printing rows in batches under one header passes its longest name)."""
    graph_width = max([graph_width, *(len(row.graph) for row in rows)])
    preset_width = max([preset_width, *(len(row.preset) for row in rows)])
    header = (f"{'graph':{graph_width}s} {'preset':{preset_width}s} {'partitioner':18s} {'segs':>5s} {'bound':>5s} {'engines':>7s} "
              f"{'bytes':>10s} {'ms':>9s}  note")
    lines = [header]
    for row in rows:
        def cell(value: Any, width: int) -> str:
            return f"{'-' if value is None else value:>{width}}"

        ms = None if row.seconds is None else f"{row.seconds * 1000:.2f}"
        lines.append(
            f"{row.graph:{graph_width}s} {row.preset:{preset_width}s} {row.partitioner:18s} {cell(row.segments, 5)} "
            f"{cell(row.lower_bound, 5)} {cell(row.engines, 7)} {cell(row.boundary_bytes, 10)} {cell(ms, 9)}  {row.note}"
        )
    return "\n".join(lines)


Tally = dict[tuple[str, str, str], Counter]


def tally(rows: Iterable[Row]) -> Tally:
    """``{(partitioner, peer, metric): Counter(worse=, equal=, better=)}`` over graphs, metric ``segments``
    or ``engines`` (fewer is better); rows that did not run are left out."""
    by_graph: dict[tuple[str, str], dict[str, Row]] = {}
    for row in rows:
        if row.segments is not None:
            by_graph.setdefault((row.graph, row.preset), {})[row.partitioner] = row
    result: Tally = {}
    for partitioners in by_graph.values():
        for partitioner, row in partitioners.items():
            for peer, other in partitioners.items():
                if peer == partitioner:
                    continue
                for metric in ("segments", "engines"):
                    mine, theirs = getattr(row, metric), getattr(other, metric)
                    verdict = "worse" if mine > theirs else "better" if mine < theirs else "equal"
                    result.setdefault((partitioner, peer, metric), Counter())[verdict] += 1
    return result


def format_tally(result: Tally, partitioners: Sequence[str] | None = None) -> str:
    """Per metric, a matrix: row partitioner against column peer, cells ``worse/equal/better``."""
    names = list(partitioners) if partitioners else sorted({key[0] for key in result})
    lines = []
    for metric in ("segments", "engines"):
        lines.append(f"{metric}: row vs column, worse/equal/better (fewer is better)")
        lines.append(f"{'':18s}" + "".join(f"{peer:>20s}" for peer in names))
        for partitioner in names:
            cells = []
            for peer in names:
                counts = result.get((partitioner, peer, metric))
                text = "-" if counts is None else f"{counts['worse']}/{counts['equal']}/{counts['better']}"
                cells.append(f"{text:>20s}")
            lines.append(f"{partitioner:18s}" + "".join(cells))
        lines.append("")
    return "\n".join(lines)


def lower_bound_hits(rows: Iterable[Row]) -> dict[str, tuple[int, int]]:
    """Per partitioner, ``(graphs where segments == lower bound, graphs)``: meaningful where no rule moves
    nodes after the decisions (``min_block_size=1``, no non-Tensor value between targets)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        if row.segments is not None and row.lower_bound is not None:
            entry = counts.setdefault(row.partitioner, [0, 0])
            entry[0] += row.segments == row.lower_bound
            entry[1] += 1
    return {partitioner: (hit, total) for partitioner, (hit, total) in counts.items()}


def random_graph(seed: int, min_nodes: int = 8, max_nodes: int = 80, ops: Sequence[str] | None = None):
    """A seeded random graph of ``min_nodes``..``max_nodes`` compute nodes, 10-40% of its recipe's steps
    without a converter (``trtcheck.partitioners``; ``ops`` default: Tensor-only ops, so that no non-Tensor
    value meets a boundary)."""
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


def _zoo_rows(
    model_names: Sequence[str], preset_names: Sequence[str], partitioners: Sequence[str], log: Callable[[str], None],
    graph_width: int = 24,
) -> list[Row]:
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
        flat = flat_inputs(gm, example_inputs, None)
        for preset in presets:
            settings = preset.settings_for(entry.fallback_module)
            if settings is None:
                continue
            forced = resolve_modules(settings.torch_executed_modules, gm.graph, model)
            new = compare(gm, flat, settings, name=model_name, preset=preset.name, partitioners=partitioners, forced_modules=forced)
            rows += new
            log(format_rows(new, graph_width).split("\n", 1)[1])
    return rows


def compare_many(
    zoo_presets: Sequence[str] | None,
    models: Sequence[str] = ("*",),
    random_graphs: int = 0,
    seed: int = 0,
    partitioners: Sequence[str] = PARTITIONERS,
    quiet: bool = False,
) -> int:
    """``trtcheck compare`` without a model: every zoo model matching ``models`` under ``zoo_presets`` (None:
    no zoo; empty: the default presets), and ``random_graphs`` seeded random graphs from ``seed``; a line per
    graph (unless ``quiet``), then worse/equal/better tallies per section."""

    def log(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    model_names = [n for n in trtcheck_zoo.names() if any(fnmatch.fnmatchcase(n, p) for p in models)] if zoo_presets is not None else []
    graph_width = max([24, *map(len, model_names), len(f"random-{seed + random_graphs}")])  # one header for every batch
    log(format_rows([], graph_width))
    sections: list[tuple[str, list[Row]]] = []
    if zoo_presets is not None:
        sections.append(("zoo", _zoo_rows(model_names, list(zoo_presets) or list(DEFAULT_PRESETS), partitioners, log, graph_width)))
    if random_graphs:
        rows: list[Row] = []
        settings = Settings(min_block_size=1)
        for graph_seed in range(seed, seed + random_graphs):
            graph = random_graph(graph_seed)
            new = compare(graph.graph_module, graph.example_inputs, settings, supports_all_but(),
                          name=f"random-{graph_seed}", preset="min_block_size_1", partitioners=partitioners)
            rows += new
            log(format_rows(new, graph_width).split("\n", 1)[1])
        sections.append((f"random graphs (seeds {seed}..{seed + random_graphs - 1})", rows))
    ran = [s for s in partitioners if s != "torch_tensorrt"]
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
            f"{name} {_median([r.seconds for r in timed if r.partitioner == name]) * 1000:.2f}" for name in ran))
    return 0


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else math.nan

