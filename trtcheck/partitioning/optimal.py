"""``segmentation="optimal"``: the fewest segments any order of the graph allows, then the fewest boundary bytes.

Why a level assignment is optimal
---------------------------------
With two targets, merged neighbours alternate (TensorRT, Torch, TensorRT, ...), so a segmentation with
``K`` segments is a *level* per node, ``0 .. K-1``, whose parity is fixed by the node's target once the
first segment's target (the *start*) is chosen, and which never decreases along an edge (it increases by
one at least where the target changes). The as-soon-as-possible assignment

    level(v) = max(parity(v), max over inputs u of level(u) + (1 if target(u) != target(v) else 0))

is the pointwise smallest such assignment, so no segmentation with that start has fewer segments than its
highest level + 1; and it *is* a segmentation: every node of one level has one target, edges never go to a
lower level, and nodes of one level run in graph order, so grouping by level makes no cycle. Taking the
better start gives the lower bound: the longest chain of target changes along any path, plus one, plus
one more where the path must begin with the other target, minimized over the start (``lower_bound``).
Only level 0 can be empty (a node at level k > 0 reads one at level k - 1 or is a source of parity 1).

The fewest segments also give the fewest TensorRT engines any convex grouping allows (what torch.fx's
CapabilityBasedPartitioner searches for): with Torch first, the TensorRT levels number exactly the most
TensorRT runs along any path, a lower bound for engines; a start with fewer segments never has more
engines than that, and ties between starts are broken by engines.

Among assignments with that many segments, a node may sit anywhere between its ASAP and its ALAP level
(the latest, computed backwards from the same number of levels). Which one decides the bytes crossing
boundaries, the secondary objective: ``optimal`` scores ASAP and ALAP for the best start(s), then moves
single nodes of the best two to other legal levels while that lowers the bytes (a local search: exact on
the segment count, a heuristic on the bytes, which reached the exhaustive minimum on 1,043 of 1,043 small
graphs). TensorRT producers of non-Tensor values then move to their first user's level (``_sink``).

``operator.getitem`` joins the level of the tuple it indexes, as in the other segmenters. The driver
(``partitioner.py``) runs this segmenter through the same rules as the others (Tensor-only boundaries,
``min_block_size``, until nothing changes), and, because ``min_block_size`` fallbacks cascade differently
from different segmentations, also runs ``dependency_aware`` and keeps whichever ends with fewer segments:
so ``optimal`` never makes more segments than ``dependency_aware`` (``partitioner._best_candidate``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch import Tensor

from trtcheck.lowering.graph import is_mutable_state
from trtcheck.lowering.symbols import value_bytes
from trtcheck.partitioning.nodes import is_getitem, is_tensor_value
from trtcheck.partitioning.order import state_order
from trtcheck.partitioning.partition import Segment
from trtcheck.partitioning.reasons import Target

_TRT, _TORCH = 0, 1
_LOCAL_SEARCH_PASSES = 3


@dataclass
class _Graph:
    """The nodes as groups (a node and the ``getitem`` nodes that index it) with integer edges, and the
    values that cross between groups (a Tensor made by one group and read by another, or a graph input)."""

    members: list[list[torch.fx.Node]]
    code: list[int]  # _TRT or _TORCH per group
    preds: list[list[int]]
    succs: list[list[int]]
    reads: list[list[int]]  # per group: the values it reads from outside itself, deduplicated
    made: list[list[int]]  # per group: the values it makes that another group reads
    producer: list[int]  # per value: its group, or -1 for a graph input (or mutable state)
    size: list[int]  # per value: bytes
    readers: list[list[int]]  # per value: the groups that read it, each once, in graph order
    sinks: list[int]  # TensorRT groups whose non-Tensor value other groups read, in graph order
    # (in a bare ``_structure``: every group whose non-Tensor value other groups read)


def _build(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> _Graph:
    return _with_targets(_structure(nodes), targets)


def _structure(nodes: Sequence[torch.fx.Node], order: Mapping[torch.fx.Node, Sequence[torch.fx.Node]] | None = None) -> _Graph:
    """Everything but the targets (``code`` and ``sinks`` left empty): the same across the driver's rounds.

    One pass over the nodes and one over their inputs, with the per-value checks inlined: at 100k nodes
    this runs once per node list the driver sees. ``order``: ``state_order(nodes)``, when the caller has it.
    """
    group_of: dict[torch.fx.Node, int] = {}
    members: list[list[torch.fx.Node]] = []
    for node in nodes:
        if is_getitem(node):
            g = group_of.get(node.args[0])
            if g is not None:  # a tuple never crosses a boundary
                members[g].append(node)
                group_of[node] = g
                continue
        group_of[node] = len(members)
        members.append([node])
    count = len(members)
    preds: list[list[int]] = [[] for _ in range(count)]
    succs: list[list[int]] = [[] for _ in range(count)]
    reads: list[list[int]] = [[] for _ in range(count)]
    made: list[list[int]] = [[] for _ in range(count)]
    value_id: dict[torch.fx.Node, int] = {}
    producer: list[int] = []
    size: list[int] = []
    readers: list[list[int]] = []
    non_tensor: set[int] = set()  # groups whose non-Tensor value another group reads
    outside: dict[torch.fx.Node, bool] = {}  # graph inputs and mutable state: read as inputs
    for g, group in enumerate(members):
        reads_g, preds_g = reads[g], preds[g]
        # Only the group's first node reads from outside: its other members index the tuple it makes.
        for value in group[0].all_input_nodes:
            u = group_of.get(value)
            if u is None:
                crosses = outside.get(value)
                if crosses is None:
                    crosses = outside[value] = value.op == "placeholder" or _is_mutable_state(value)
                if not crosses:
                    continue  # a constant, which travels with every segment that reads it
            v = value_id.get(value)
            if v is None:
                v = value_id[value] = len(producer)
                producer.append(-1 if u is None else u)
                traced = value.meta.get("val")
                if isinstance(traced, Tensor):  # value_bytes and node_is_tensor, inlined
                    count = math.prod(traced.shape)  # a SymInt for a dynamic size (no guard): value_bytes reads its hint
                    size.append(count * traced.element_size() if type(count) is int else value_bytes(value))
                else:
                    size.append(0)
                    if u is not None and not is_tensor_value(traced):
                        non_tensor.add(u)
                readers.append([g])
                if u is not None:
                    made[u].append(v)
            else:
                readers[v].append(g)
            reads_g.append(v)
            if u is not None:
                preds_g.append(u)
                succs[u].append(g)
    # Reads and writes around an in-place write keep their order: edges without a value (no bytes cross them).
    for node, befores in (state_order(nodes) if order is None else order).items():
        g = group_of[node]
        for before in befores:
            u = group_of.get(before)
            if u is not None and u != g:
                preds[g].append(u)
                succs[u].append(g)
    return _Graph(members, [], preds, succs, reads, made, producer, size, readers, sorted(non_tensor))


_MAY_WRITE: dict[object, bool] = {}  # per op: whether its schema writes to any argument (or it has none)


def _is_mutable_state(value: torch.fx.Node) -> bool:
    """``is_mutable_state``, asked only where a user's op can write to an argument at all (most constants
    are read by ops that write nothing: at 100k nodes, checking their schemas argument by argument cost
    more than the rest of this value's bookkeeping)."""
    if value.op != "get_attr":
        return False
    for user in value.users:
        if user.op != "call_function":
            continue
        target = user.target
        try:
            writes = _MAY_WRITE.get(target)
        except TypeError:  # an unhashable target: ask the exact check
            return is_mutable_state(value)
        if writes is None:
            schema = getattr(target, "_schema", None)
            writes = schema is None or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
            _MAY_WRITE[target] = writes
        if writes:
            return is_mutable_state(value)
    return False


def _with_targets(structure: _Graph, targets: dict[torch.fx.Node, Target]) -> _Graph:
    trt = Target.TENSORRT
    code = [_TRT if targets[group[0]] is trt else _TORCH for group in structure.members]
    sinks = [g for g in structure.sinks if code[g] == _TRT]
    return dataclasses.replace(structure, code=code, sinks=sinks)


def _asap(graph: _Graph, start: int) -> list[int]:
    code, preds = graph.code, graph.preds
    level = [0] * len(code)
    for g, c in enumerate(code):
        best = c ^ start
        for u in preds[g]:
            candidate = level[u] + (code[u] != c)
            if candidate > best:
                best = candidate
        level[g] = best
    return level


def _alap(graph: _Graph, start: int, top: int) -> list[int]:
    """The latest levels with the highest level ``top`` (that of ASAP with the same start)."""
    code, succs = graph.code, graph.succs
    level = [0] * len(code)
    for g in range(len(code) - 1, -1, -1):
        c = code[g]
        best = top if (top ^ c ^ start) & 1 == 0 else top - 1
        for s in succs[g]:
            candidate = level[s] - (code[s] != c)
            if candidate < best:
                best = candidate
        level[g] = best
    return level


def _cost(graph: _Graph, level: list[int]) -> int:
    """The boundary bytes of a level assignment (``boundary_bytes`` of its segments, without building them):
    per value, its bytes times the levels other than its producer's that read it (for a graph input: the
    TensorRT levels that read it)."""
    code, producer, size = graph.code, graph.producer, graph.size
    total = 0
    for v, readers in enumerate(graph.readers):
        bytes_ = size[v]
        if not bytes_:
            continue
        p = producer[v]
        if len(readers) == 1:  # most values: one reader
            g = readers[0]
            if (level[p] != level[g]) if p >= 0 else code[g] == _TRT:
                total += bytes_
        elif p >= 0:
            here = level[p]
            total += bytes_ * len({level[g] for g in readers if level[g] != here})
        else:
            total += bytes_ * len({level[g] for g in readers if code[g] == _TRT})
    return total


def _shape(graph: _Graph, level: list[int]) -> tuple[int, int]:
    """(segments, TensorRT segments) of a level assignment: empty levels are no segments."""
    used: dict[int, int] = {}
    for at_level, c in zip(level, graph.code, strict=True):
        used[at_level] = c
    return len(used), sum(1 for c in used.values() if c == _TRT)


def _improve(graph: _Graph, level: list[int], start: int, top: int, movable: list[int]) -> int:
    """Move single groups to other legal levels while that lowers the boundary bytes (in place); returns
    the (exact, never positive) change of the bytes.

    A group may take any level of its parity between its inputs' levels and its users' levels (plus one
    where the target changes) within ``0 .. top``, so the number of segments never grows. Only
    ``movable`` groups (ASAP and ALAP levels differ: the others have one legal level) are visited, and
    only the levels where a move can save something are tried: its users' and producers' levels, and
    the levels that already read its inputs.

    A group's choice depends only on the levels of its producers and users and on where the values it
    reads and makes are read; so after the first pass only the groups next to a move (and the group that
    moved) are visited again: the others would find what they found before, nothing. The result is that
    of visiting every movable group on every pass, at a fraction of the work.
    """
    code, preds, succs, reads, made, readers = graph.code, graph.preds, graph.succs, graph.reads, graph.made, graph.readers
    producer, size = graph.producer, graph.size
    at: list[dict[int, int]] = [{} for _ in producer]  # per value: how many reading groups sit at each level
    for g, reads_g in enumerate(reads):
        here = level[g]
        for v in reads_g:
            per_level = at[v]
            per_level[here] = per_level.get(here, 0) + 1
    dirty = bytearray(len(code))
    for g in movable:
        dirty[g] = 1
    change = 0
    for pass_index in range(_LOCAL_SEARCH_PASSES):
        moved = False
        # Alternate directions: visiting users first frees their producers to move later, and the reverse.
        for g in reversed(movable) if pass_index % 2 == 0 else movable:
            if not dirty[g]:
                continue
            dirty[g] = 0
            c = code[g]
            parity = c ^ start
            low = parity
            preds_g = preds[g]
            for u in preds_g:
                bound = level[u] + (code[u] != c)
                if bound > low:
                    low = bound
            high = top if (top & 1) == parity else top - 1
            succs_g = succs[g]
            for t in succs_g:
                bound = level[t] - (code[t] != c)
                if bound < high:
                    high = bound
            if low >= high:
                continue
            current = level[g]
            reads_g = reads[g]
            options = {level[t] for t in succs_g}
            options.update(level[u] for u in preds_g)
            first = low if (low & 1) == parity else low + 1
            span = (high - first) // 2 + 1  # the legal levels: few, however many levels read a value
            for v in reads_g:
                per_level = at[v]
                if len(per_level) > span:  # a value read everywhere (a buffer, a graph input): look up the legal levels
                    options.update(option for option in range(first, high + 1, 2) if option in per_level)
                else:
                    options.update(per_level)
            options.discard(current)
            options = sorted(option for option in options if low <= option <= high and (option & 1) == parity)
            if not options:
                continue
            # The exact change of the bytes, value by value: what leaving ``current`` saves (a level
            # that no longer reads a value) and what arriving at ``option`` costs (a level that starts
            # reading one; for the values ``g`` makes, its readers at ``current`` start paying and
            # those at ``option`` stop).
            trt_here = c == _TRT  # graph inputs cost only where TensorRT reads them
            saved = 0
            for v in reads_g:
                if at[v][current] == 1:
                    p = producer[v]
                    if (level[p] != current) if p >= 0 else trt_here:
                        saved += size[v]
            made_g = made[g]
            leaving = 0  # the values g makes whose readers at ``current`` start paying, wherever g goes
            for v in made_g:
                if current in at[v]:
                    leaving += size[v]
            best_level, best_delta = current, 0
            for option in options:
                delta = leaving - saved
                for v in reads_g:
                    if option not in at[v]:
                        p = producer[v]
                        if (level[p] != option) if p >= 0 else trt_here:
                            delta += size[v]
                for v in made_g:
                    if option in at[v]:
                        delta -= size[v]
                if delta < best_delta:
                    best_level, best_delta = option, delta
            if best_level != current:
                for v in reads_g:
                    per_level = at[v]
                    count = per_level[current] - 1
                    if count:
                        per_level[current] = count
                    else:
                        del per_level[current]
                    per_level[best_level] = per_level.get(best_level, 0) + 1
                level[g] = best_level
                change += best_delta
                moved = True
                # Whose choice this move can change: g, its producers and users, and the other readers
                # of what g reads (they share ``at``).
                dirty[g] = 1
                for u in preds_g:
                    dirty[u] = 1
                for t in succs_g:
                    dirty[t] = 1
                for v in reads_g:
                    for h in readers[v]:
                        dirty[h] = 1
        if not moved:
            break
    return change


def _sink(graph: _Graph, level: list[int], start: int, top: int) -> None:
    """Move every TensorRT producer of a non-Tensor value (a ``sym_size``) to its earliest user's level.

    Why: a non-Tensor value may not cross a TensorRT boundary, so the copy rule recomputes it in the
    segment that reads it; a segmenter that then placed the copy anywhere else (ASAP would put it right
    after its input) would make the rule copy it again, for ever. At its user's level it is inside the
    user's segment. Latest first, so that a chain of such producers follows its end.
    """
    code, succs = graph.code, graph.succs
    for g in reversed(graph.sinks):
        c = code[g]
        high = top if (top & 1) == c ^ start else top - 1
        for t in succs[g]:
            bound = level[t] - (code[t] != c)
            if bound < high:
                high = bound
        level[g] = high


_IMPROVED_CANDIDATES = 2


def _levels(graph: _Graph, improve: bool = True) -> tuple[list[int], int]:
    """The best level assignment and its start: fewest segments, then engines, then bytes.

    Both starts' ASAP levels give the segment and engine counts (ALAP and the local search keep them), so
    only the starts that tie on those are scored for bytes, ASAP and ALAP each; the local search then
    improves the best ``_IMPROVED_CANDIDATES`` of these. Measured against the exhaustive optimum on 1,043
    small graphs: improving all four reached it on every one, the best two on every one, the best one
    on 1,040 (and none on 1,028), and improving costs the most at 100k nodes.

    When every Torch group reads another group (no Torch group can open the graph), starting with Torch
    only leaves level 0 empty: every level, legal range and move of that start is the TensorRT start's
    one level higher, with the same bytes. Its candidates are then *twins*: ranked as before (they sort
    right after their originals and lose ties to them) but neither computed nor improved, which would
    only repeat the work (at 100k nodes, half of it).
    """
    code, preds = graph.code, graph.preds
    shifted = all(preds[g] for g, c in enumerate(code) if c == _TORCH)
    asap_trt = _asap(graph, _TRT)
    shape_trt = _shape(graph, asap_trt)
    if shifted:
        shaped = [(shape_trt, _TRT, asap_trt), (shape_trt, _TORCH, None)]
    else:
        asap_torch = _asap(graph, _TORCH)
        shaped = [(shape_trt, _TRT, asap_trt), (_shape(graph, asap_torch), _TORCH, asap_torch)]
    fewest = min(shape for shape, _, _ in shaped)
    # (bytes, rank, levels, start, top, movable, twin): a twin's levels are its original's plus one
    scored: list[tuple[int, int, list[int] | None, int, int, list[int], bool]] = []
    originals: list[tuple[int, int, list[int] | None, int, int, list[int], bool]] = []
    for shape, start, asap in shaped:
        if shape != fewest:
            continue
        if asap is None:  # the twin of the TensorRT start, which is in ``originals`` (same shape)
            for cost, _, _, _, top, movable, _ in originals:
                scored.append((cost, len(scored), None, start, top + 1, movable, True))
            continue
        top = max(asap)
        alap = _alap(graph, start, top)
        movable = [g for g, (early, late) in enumerate(zip(asap, alap, strict=True)) if early != late]
        if not movable:  # one legal level per group: nothing to choose
            scored.append((0, len(scored), asap, start, top, movable, False))
        else:
            for level in (asap, alap):
                scored.append((_cost(graph, level) if improve else 0, len(scored), level, start, top, movable, False))
        if start == _TRT:
            originals = list(scored)
    scored.sort(key=lambda entry: entry[:2])
    best: tuple[int, list[int], int, int] | None = None
    for cost, _, level, start, top, movable, twin in scored[:_IMPROVED_CANDIDATES if improve else 1]:
        if twin:  # improved, it would equal its original (ranked before it, so also here) and lose the tie
            continue
        assert level is not None
        if improve and movable:
            cost += _improve(graph, level, start, top, movable)
        if best is None or cost < best[0]:
            best = (cost, level, start, top)
    assert best is not None
    _, level, start, top = best
    if graph.sinks:
        _sink(graph, level, start, top)
    return level, start


def lower_bound(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> int:
    """The fewest segments any order allows for these targets: the longest chain of target changes along
    a path, plus one, plus one where the path must start with the other target, minimized over the start."""
    graph = _build(nodes, targets)
    if not graph.code:
        return 0
    return min(len(set(_asap(graph, start))) for start in (_TRT, _TORCH))


class Optimal:
    """The ``optimal`` segmenter, remembering the graph's structure between calls.

    Why: the driver calls its segmenter once per round of the rules, with new targets but, unless the
    copy rule inserted a node, the very same nodes; the structure (groups, edges, values and their bytes)
    is most of the work. It is rebuilt whenever the node list differs (the copy rule always inserts a
    node). The levels of the last call are kept too: the same nodes with the same targets (the driver
    probing whether the graph must change, then running for real) get them back without a new search.
    An instance serves one partitioning run: a graph edited behind its back without a change to its
    node list would be missed.
    """

    def __init__(self) -> None:
        self._nodes: list[torch.fx.Node] | None = None
        self._structure: _Graph | None = None
        self._last: tuple[list[int], tuple[list[int], int]] | None = None  # (code, (levels, start))

    def moved(self, mapping: dict[torch.fx.Node, torch.fx.Node]) -> Optimal:
        """This segmenter for a copy of the graph (``mapping``: each node to its copy), keeping what it knows."""
        moved = Optimal()
        if self._structure is not None and self._nodes is not None:
            moved._nodes = [mapping[node] for node in self._nodes]
            members = [[mapping[node] for node in group] for group in self._structure.members]
            moved._structure = dataclasses.replace(self._structure, members=members)
            moved._last = self._last
        return moved

    def __call__(
        self,
        nodes: Sequence[torch.fx.Node],
        targets: dict[torch.fx.Node, Target],
        order: Mapping[torch.fx.Node, Sequence[torch.fx.Node]] | None = None,
    ) -> list[Segment]:
        """``order``: ``state_order(nodes)``, when the caller has it (the driver's rounds reuse it)."""
        nodes = list(nodes)
        if self._structure is None or nodes != self._nodes:
            self._nodes, self._structure, self._last = nodes, _structure(nodes, order), None
        graph = _with_targets(self._structure, targets)
        if not graph.code:
            return []
        if self._last is not None and self._last[0] == graph.code:
            levels = self._last[1]
        else:
            levels = _levels(graph)
            self._last = (graph.code, (list(levels[0]), levels[1]))
            levels = self._last[1]
        return _segments_at(graph, *levels)


def optimal(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> list[Segment]:
    """Segments by level (see the module docstring): as few as the targets allow, then fewest bytes."""
    return _segments(_build(nodes, targets))


def _segments(graph: _Graph) -> list[Segment]:
    if not graph.code:
        return []
    return _segments_at(graph, *_levels(graph))


def _segments_at(graph: _Graph, level: list[int], start: int) -> list[Segment]:
    buckets: dict[int, list[torch.fx.Node]] = {}
    for group, at_level in zip(graph.members, level, strict=True):
        bucket = buckets.get(at_level)
        if bucket is None:
            buckets[at_level] = list(group)
        else:
            bucket.extend(group)
    # Graph order inside a level (a valid order, since edges never go down a level): the groups are in
    # the order of their first node, and a group's other nodes (getitem) come later in the graph but
    # only read the group's first node, so appending a group at once keeps every node after its inputs.
    return [
        Segment(Target.TENSORRT if (at_level & 1) == start ^ _TRT else Target.TORCH, buckets[at_level])
        for at_level in sorted(buckets)
    ]
