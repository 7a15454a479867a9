"""A partition drawn as one self-contained HTML page: the graph, each node coloured by where it runs.

``trtcheck partition TARGET --html FILE`` writes it. The page needs no network (inline SVG, CSS and a few
lines of JS, no CDN), so it can be attached to a CI run or mailed as it is. Each node shows its op and
output shape; hovering shows its name, segment, target, the reason it runs there and where in the user's code it
came from (an SVG ``<title>``, which every browser shows as a tooltip); clicking a node or a legend entry highlights
its segment. The Torch nodes by reason are listed beside the graph, each reason's nodes grouped by their source.

Layout: nodes sit in rows by topological depth (the longest path from a graph input), and within a row
they are ordered by the mean position of their inputs (one barycenter sweep), which keeps a branch
beside its producer. Everything is linear in nodes + edges (plus a sort per row), so a 10k-node graph
renders as quickly as it can be read; parameters and constants (``get_attr``) are left out, since they
would be most of the boxes and say nothing about the partition.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from trtcheck.partitioning.explain import ExplainSummary, reason_heading
from trtcheck.partitioning.nodes import in_branch
from trtcheck.partitioning.partition import Partition
from trtcheck.partitioning.reasons import Target
from trtcheck.provenance import from_source, node_source
from trtcheck.text import plural

TENSORRT_COLOR = "#76b900"  # as in trtcheck.report.plots: NVIDIA green
TORCH_COLOR = "#ee4c2c"  # PyTorch orange
# Light fills alternate between neighbouring segments of one target, so two engines stay apart.
FILLS = {Target.TENSORRT: ("#dff0c0", "#c4e39a"), Target.TORCH: ("#fbd3cb", "#f6b3a5")}
STROKES = {Target.TENSORRT: TENSORRT_COLOR, Target.TORCH: TORCH_COLOR}
IO_FILL, IO_STROKE = "#e8e8e8", "#8a8a8a"

BOX_W, BOX_H, COL_GAP, ROW_GAP, MARGIN = 210, 38, 70, 22, 20
MAX_LABEL = 30  # characters per line that fit BOX_W at 11px monospace

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "bool", torch.complex64: "c64",
}


def partition_html(partition: Partition, title: str = "trtcheck partition") -> str:
    """The page for ``partition``: the explain summary, a legend, and the graph as inline SVG."""
    summary = ExplainSummary.of(partition)
    sources = _sources_by_name(partition)  # once: each is a walk of the node's stack trace
    svg = _graph_svg(partition, sources)
    return _PAGE.format(
        title=html.escape(title),
        summary=_summary_html(partition, summary, sources),
        svg=svg,
        style=_STYLE,
        script=_SCRIPT,
    )


# --- layout ---------------------------------------------------------------------------------------------


def _shown_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [node for node in graph.nodes if node.op != "get_attr"]


def layout(nodes: Sequence[torch.fx.Node]) -> dict[torch.fx.Node, tuple[int, float]]:
    """``(row, position)`` of each node: row = topological depth, position = order within the row.

    ``nodes`` must be in topological order (a graph's order is). Positions are floats centred on 0 so
    rows of different widths line up around one axis.
    """
    shown = set(nodes)
    depth: dict[torch.fx.Node, int] = {}
    for node in nodes:
        parents = [p for p in node.all_input_nodes if p in shown]
        depth[node] = 1 + max((depth[p] for p in parents), default=-1)
    for node in reversed(nodes):  # a node made from constants alone (a weight's transpose) sits above its first user
        if node.op != "placeholder" and not any(p in shown for p in node.all_input_nodes):
            below = [depth[user] for user in node.users if user in shown]
            depth[node] = max(min(below, default=1) - 1, 0)
    rows: dict[int, list[torch.fx.Node]] = {}
    for node in nodes:
        rows.setdefault(depth[node], []).append(node)
    position: dict[torch.fx.Node, float] = {}
    order = {node: i for i, node in enumerate(nodes)}
    for row in sorted(rows):
        members = rows[row]

        def barycenter(node: torch.fx.Node) -> tuple[float, int]:
            placed = [position[p] for p in node.all_input_nodes if p in position]
            return (sum(placed) / len(placed) if placed else 0.0, order[node])

        members.sort(key=barycenter)
        offset = (len(members) - 1) / 2
        for index, node in enumerate(members):
            position[node] = index - offset
    return {node: (depth[node], position[node]) for node in nodes}


# --- drawing --------------------------------------------------------------------------------------------


def _graph_svg(partition: Partition, sources: dict[str, str]) -> str:
    nodes = _shown_nodes(partition.graph_module.graph)
    places = layout(nodes)
    segment_of = {node: (index, segment.target) for index, segment in enumerate(partition.segments) for node in segment.nodes}
    fills = segment_fills(partition)
    min_pos = min((p for _, p in places.values()), default=0.0)
    max_pos = max((p for _, p in places.values()), default=0.0)
    rows = max((r for r, _ in places.values()), default=0) + 1
    width = int((max_pos - min_pos + 1) * (BOX_W + COL_GAP) + 2 * MARGIN)
    height = int(rows * (BOX_H + ROW_GAP) + 2 * MARGIN)

    def corner(node: torch.fx.Node) -> tuple[float, float]:
        row, pos = places[node]
        return MARGIN + (pos - min_pos) * (BOX_W + COL_GAP), MARGIN + row * (BOX_H + ROW_GAP)

    edges, boxes = [], []
    for node in nodes:
        x, y = corner(node)
        for parent in node.all_input_nodes:
            if parent not in places:
                continue
            px, py = corner(parent)
            crosses = segment_of.get(parent, (None,))[0] != segment_of.get(node, (None,))[0]
            css = "edge boundary" if crosses else "edge"
            span = places[node][0] - places[parent][0]
            if span <= 1:  # neighbouring rows: bottom centre to top centre
                x0, y0, x1, y1 = px + BOX_W / 2, py + BOX_H, x + BOX_W / 2, y
                bend = max((y1 - y0) / 2, ROW_GAP / 2)
                d = f"M{x0:.0f},{y0:.0f} C{x0:.0f},{y0 + bend:.0f} {x1:.0f},{y1 - bend:.0f} {x1:.0f},{y1:.0f}"
            else:  # a skip connection: an arc right of the boxes between, so it never runs through them
                x0, y0, x1, y1 = px + BOX_W, py + BOX_H / 2, x + BOX_W, y + BOX_H / 2
                bulge = max(x0, x1) + 16 + 2 * min(span, 12)
                d = f"M{x0:.0f},{y0:.0f} C{bulge:.0f},{y0:.0f} {bulge:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
            edges.append(f'<path class="{css}" d="{d}"/>')
        boxes.append(_node_svg(node, x, y, segment_of.get(node), fills, partition, sources.get(node.name, "")))
    return (
        f'<svg id="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="partitioned graph">'
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#666"/></marker></defs>'
        f'<g class="edges">{"".join(edges)}</g><g class="nodes">{"".join(boxes)}</g></svg>'
    )


def segment_fills(partition: Partition) -> dict[int, str]:
    """The fill of each segment: its target's two shades, alternating among that target's segments."""
    seen = {Target.TENSORRT: 0, Target.TORCH: 0}
    fills = {}
    for index, segment in enumerate(partition.segments):
        fills[index] = FILLS[segment.target][seen[segment.target] % 2]
        seen[segment.target] += 1
    return fills


def _node_svg(
    node: torch.fx.Node,
    x: float,
    y: float,
    placed: tuple[int, Target] | None,
    fills: dict[int, str],
    partition: Partition,
    source: str = "",
) -> str:
    if placed is None:  # graph input, output, or (in a hand-made partition) an unplaced node
        fill, stroke, segment, where = IO_FILL, IO_STROKE, "", "graph input" if node.op == "placeholder" else node.op
        if node.op not in ("placeholder", "output"):
            where, stroke = "in no segment", "#000"
    else:
        index, target = placed
        fill, stroke = fills[index], STROKES[target]
        segment, where = str(index), f"{target.display} (segment @{index})"
    op = _op_label(node)
    shape = _shape_label(node.meta.get("val")) if node.op != "output" else ""
    reason = partition.reasons.get(node)
    tooltip = [node.name, f"op: {_op_full(node)}", f"runs: {where}"]
    if shape:
        tooltip.append(f"value: {shape}")
    if reason is not None:
        heading = reason_heading(reason.kind, placed[1] if placed is not None else None)
        tooltip.append(f"reason: {heading}" + (f" - {reason.detail}" if reason.detail else ""))
    if source:
        tooltip.append(from_source(source))
    tag = f'<text class="seg" x="{x + BOX_W - 5:.0f}" y="{y + 13:.0f}">@{segment}</text>' if segment else ""
    return (
        f'<g class="node" data-segment="{segment}">'
        f"<title>{html.escape(chr(10).join(tooltip))}</title>"
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5" fill="{fill}" stroke="{stroke}"/>'
        f'<text class="op" x="{x + 7:.0f}" y="{y + 15:.0f}">{html.escape(_fit(op, MAX_LABEL - 4))}</text>'
        f'<text class="shape" x="{x + 7:.0f}" y="{y + 30:.0f}">{html.escape(_fit(shape, MAX_LABEL))}</text>{tag}</g>'
    )


def _op_full(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "output"):
        return node.op
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def _op_label(node: torch.fx.Node) -> str:
    """``convolution``, ``add.Tensor``, ``input x``: the op without the namespace and a ``.default``."""
    if node.op == "placeholder":
        return f"input {node.name}"
    if node.op == "output":
        return "output"
    return _op_full(node).removeprefix("aten.").removesuffix(".default")


def _shape_label(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{_DTYPES.get(value.dtype, str(value.dtype).removeprefix('torch.'))}[{', '.join(map(str, value.shape))}]"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape_label(v) for v in value) + ")"
    if value is None:
        return ""
    return f"{type(value).__name__} {value}"


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# --- the page -------------------------------------------------------------------------------------------


def _summary_html(partition: Partition, summary: ExplainSummary, sources: dict[str, str]) -> str:
    fills = segment_fills(partition)
    engines = "".join(
        f'<li class="legend" data-segment="{e.index}"><span class="swatch" style="background:{fills[e.index]};'
        f'border-color:{TENSORRT_COLOR}"></span>engine @{e.index}: {plural(e.nodes, "compute node")}</li>'
        for e in summary.engines
        if not e.branch  # the page draws the model's own graph; branch engines are in the summary lines only
    )
    torch_segments = "".join(
        f'<li class="legend" data-segment="{i}"><span class="swatch" style="background:{fills[i]};'
        f'border-color:{TORCH_COLOR}"></span>Torch @{i}: {plural(s.size, "compute node")}</li>'
        for i, s in enumerate(partition.segments)
        if s.target is Target.TORCH
    )
    groups = []
    for group in summary.torch_groups:
        heading = reason_heading(group.kind, Target.TORCH)
        detail = f"<br><span class=detail>{html.escape(group.detail)}</span>" if group.detail else ""
        by_source: dict[str, list[str]] = {}  # the group's nodes by where they came from, in the order first seen
        for name in group.nodes:
            by_source.setdefault(sources.get(name, ""), []).append(name)
        names = "<br>".join(
            f"<span class=names>{html.escape(', '.join(members))}</span>"
            + (f" <span class=source>{html.escape(from_source(source))}</span>" if source else "")
            for source, members in by_source.items()
        )
        groups.append(f"<li><b>{html.escape(heading)}</b> ({len(group.nodes)}){detail}<br>{names}</li>")
    reasons = f"<h2>Torch nodes by reason ({summary.torch_nodes})</h2><ul class=reasons>{''.join(groups)}</ul>" if groups else ""
    hidden = sum(node.op == "get_attr" for node in partition.graph_module.graph.nodes)
    return (
        f'<p class="coverage">{html.escape(summary.coverage_line())}<br>{html.escape(summary.engines_line())}<br>'
        f"{html.escape(partition.summary())}</p>"
        f"<h2>Segments</h2><ul class=segments>{engines}{torch_segments}</ul>"
        f'<p class="hint">Hover a node for its reason and source; click a node or a segment to highlight the segment. '
        f"Thick dark edges cross a segment boundary. {hidden} parameter/constant node(s) are not drawn.</p>"
        f"{reasons}"
    )


def _sources_by_name(partition: Partition) -> dict[str, str]:
    """``provenance.node_source`` of every node of ``partition`` and its branches that has one, by the name
    ``ExplainSummary`` gives it (``true_graph_0/relu`` in a branch)."""
    found = {}
    for path, part in partition.walk():
        for node in part.graph_module.graph.nodes:
            source = node_source(node) if node.op not in ("placeholder", "output", "get_attr") else ""
            if source:
                found[in_branch(path, node.name)] = source
    return found


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 12px 20px; border-bottom: 1px solid #ddd; }
h1 { font-size: 20px; margin: 0 0 6px; } h2 { font-size: 15px; margin: 12px 0 4px; }
main { display: flex; align-items: flex-start; }
aside { width: 380px; flex: none; padding: 0 16px 20px 20px; font-size: 13px; position: sticky; top: 0;
        max-height: 100vh; overflow: auto; box-sizing: border-box; }
#canvas { overflow: auto; flex: 1; }
.coverage { font-size: 14px; line-height: 1.5; }
ul { padding-left: 0; list-style: none; margin: 0; } li { margin: 3px 0; }
.legend { cursor: pointer; } .legend.active { font-weight: bold; }
.swatch { display: inline-block; width: 14px; height: 14px; border: 2px solid; border-radius: 3px;
          vertical-align: middle; margin-right: 6px; box-sizing: border-box; }
.reasons li { margin-bottom: 8px; } .detail { color: #555; } .names { font-family: monospace; font-size: 12px; }
.source { color: #555; font-size: 12px; }
.hint { color: #666; font-size: 12px; }
svg text { font-family: ui-monospace, monospace; font-size: 11px; pointer-events: none; }
svg text.op { font-weight: bold; } svg text.seg { text-anchor: end; fill: #444; font-size: 10px; }
svg rect { stroke-width: 1.5; } .node { cursor: pointer; }
.edge { fill: none; stroke: #9a9a9a; stroke-width: 1; marker-end: url(#arrow); }
.edge.boundary { stroke: #333; stroke-width: 2.2; }
svg.focus .node { opacity: 0.25; } svg.focus .node.hit { opacity: 1; }
svg.focus .node.hit rect { stroke-width: 3; }
"""

_SCRIPT = """
(function () {
  var svg = document.getElementById('graph');
  function highlight(segment) {
    var same = svg.classList.contains('focus') && svg.dataset.segment === segment;
    svg.classList.toggle('focus', !same && segment !== '');
    svg.dataset.segment = same ? '' : segment;
    document.querySelectorAll('.node').forEach(function (n) {
      n.classList.toggle('hit', !same && n.dataset.segment === segment);
    });
    document.querySelectorAll('.legend').forEach(function (l) {
      l.classList.toggle('active', !same && l.dataset.segment === segment);
    });
  }
  document.querySelectorAll('.node, .legend').forEach(function (el) {
    el.addEventListener('click', function () { highlight(el.dataset.segment); });
  });
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{style}</style></head>
<body><header><h1>{title}</h1></header>
<main><aside>{summary}</aside><div id="canvas">{svg}</div></main>
<script>{script}</script></body></html>
"""
