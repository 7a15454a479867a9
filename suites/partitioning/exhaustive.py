"""An exhaustive search over every valid segmentation of a small graph: the reference ``optimal`` is checked against.

It shares nothing with ``trtcheck.partitioning.optimal`` but ``boundary_bytes`` (the definition of the
secondary objective): a dynamic program over the downward-closed sets of groups (a node and the
``getitem`` nodes indexing it), where each step runs one segment, any nonempty set of not yet placed
groups of one target whose inputs are all placed or inside the set. Every valid segmentation in segment
order is such a path, so the minimum over paths of ``(segments, bytes)`` is the true optimum.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.fx

from trtcheck.partitioning.nodes import is_getitem
from trtcheck.partitioning.partition import Segment, boundary_bytes
from trtcheck.partitioning.reasons import Target


def exhaustive_optimum(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> tuple[int, int]:
    """``(fewest segments, fewest boundary bytes among segmentations with that many)``; exponential."""
    group_of: dict[torch.fx.Node, int] = {}
    members: list[list[torch.fx.Node]] = []
    for node in nodes:
        if is_getitem(node) and node.args[0] in group_of:
            group_of[node] = group_of[node.args[0]]
            members[group_of[node]].append(node)
        else:
            group_of[node] = len(members)
            members.append([node])
    count = len(members)
    if count > 16:
        raise ValueError(f"{count} groups: too many for an exhaustive search")
    pred_mask = [0] * count
    for g, group in enumerate(members):
        for node in group:
            for value in node.all_input_nodes:
                u = group_of.get(value)
                if u is not None and u != g:
                    pred_mask[g] |= 1 << u
    target_of = [targets[group[0]] for group in members]
    by_target = {t: sum(1 << g for g in range(count) if target_of[g] is t) for t in Target}
    order = {node: i for i, node in enumerate(nodes)}
    cost_cache: dict[tuple[int, Target], int] = {}

    def cost(mask: int, target: Target) -> int:
        key = (mask, target)
        if key not in cost_cache:
            chosen = sorted((n for g in range(count) if mask >> g & 1 for n in members[g]), key=order.__getitem__)
            cost_cache[key] = boundary_bytes([Segment(target, chosen)])
        return cost_cache[key]

    full = (1 << count) - 1
    best: dict[int, tuple[int, int]] = {0: (0, 0)}
    for placed in sorted(range(full + 1), key=int.bit_count):
        if placed not in best:
            continue
        here = best[placed]
        for target, of_target in by_target.items():
            free = of_target & ~placed
            sub = free
            while sub:
                if all(pred_mask[g] & ~(placed | sub) == 0 for g in range(count) if sub >> g & 1):
                    candidate = (here[0] + 1, here[1] + cost(sub, target))
                    after = placed | sub
                    if after not in best or candidate < best[after]:
                        best[after] = candidate
                sub = (sub - 1) & free
    return best[full]
