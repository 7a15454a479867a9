"""``partition_html`` and ``trtcheck partition --html``: a self-contained page drawing the partitioned graph.

The checks that need no browser come first (content, no network, scaling); the last test renders the
page in headless Chromium and looks for both target colours, and is skipped where no Chromium is installed.
"""

from __future__ import annotations

import re
import time

import pytest
import torch
import torch.fx

import trtcheck
from suites.benchmarks import screenshot_report
from suites.partitioning.partitioning_cases import SeedModel
from trtcheck.partitioning.reasons import Target
from trtcheck.tools.cli import main
from trtcheck.tools.graph_html import FILLS, layout, partition_html, segment_fills

aten = torch.ops.aten


@pytest.fixture
def seed_partition(seed_inputs):
    return trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::mul"]))


def test_each_node_is_drawn_with_op_shape_segment_and_reason(seed_partition):
    page = partition_html(seed_partition, "seed <model>")
    assert "<title>seed &lt;model&gt;</title>" in page
    titles = re.findall(r"<g class=\"node\" data-segment=\"(\d*)\"><title>([^<]*)</title>", page)
    by_name = {text.split("\n")[0]: (segment, text) for segment, text in titles}
    assert set(by_name) == {"x", "y", "add", "mul", "div", "lgamma", "lgamma_1", "lgamma_2", "cat", "output"}
    segment, text = by_name["lgamma_1"]
    assert segment == "1" and "runs: Torch (segment @1)" in text and "value: f32[2, 3]" in text
    assert "reason: no converter, or its validator refused the node - no converter for aten.lgamma.default" in text
    assert "reason: forced op (torch_executed_ops) - aten.mul.Tensor is in torch_executed_ops" in by_name["mul"][1]
    assert by_name["cat"][0] == "2" and "runs: TensorRT (segment @2)" in by_name["cat"][1]
    assert ">lgamma</text>" in page and ">f32[10, 3]</text>" in page  # the labels, not only the tooltips
    assert "op coverage: 42.9%" in page and "engine @0: 2 compute nodes" in page and "Torch @1: 4 compute nodes" in page


class _MaxThenLgamma(torch.nn.Module):
    def forward(self, x):
        values, _ = torch.max(x, dim=1)  # a tuple and its getitem, in the engine
        return torch.lgamma(values + 1)


def test_tooltips_give_each_target_its_own_reason():
    """A TensorRT node is there because a converter accepts it, not "convertible, yet in Torch"; a getitem inside an
    engine indexes a TensorRT result. Torch nodes keep their headings."""
    partition = trtcheck.partition(_MaxThenLgamma(), (torch.rand(2, 3),), trtcheck.Settings(min_block_size=1))
    titles = re.findall(r"<g class=\"node\" data-segment=\"\d*\"><title>([^<]*)</title>", partition_html(partition))
    by_name = {text.split("\n")[0]: text for text in titles}
    assert "runs: TensorRT" in by_name["max_1"] and "reason: a converter accepts it" in by_name["max_1"], by_name["max_1"]
    assert "runs: TensorRT" in by_name["getitem"] and "reason: getitem of a TensorRT result - indexes max_1" in by_name["getitem"]
    assert "runs: Torch" in by_name["lgamma"] and "reason: no converter, or its validator refused the node" in by_name["lgamma"]
    assert "in Torch" not in by_name["max_1"] + by_name["getitem"] + by_name["add"]


def test_one_path_per_edge_and_boundary_edges_marked(seed_partition):
    page = partition_html(seed_partition)
    graph = seed_partition.graph_module.graph
    edges = sum(len(node.all_input_nodes) for node in graph.nodes if node.op != "get_attr")
    assert len(re.findall(r'<path class="edge', page)) == edges
    # x and y feed add (@0) from outside; add, div feed cat (@2) across Torch @1 ...
    assert len(re.findall(r'<path class="edge boundary"', page)) > 0


def test_the_page_needs_no_network(seed_partition):
    page = partition_html(seed_partition)
    assert not re.search(r"(src|href)\s*=|<link|@import|url\((?!#)", page), "the page must load nothing"
    assert "http" not in page


def test_neighbouring_segments_of_one_target_get_different_shades(seed_partition):
    fills = segment_fills(seed_partition)  # @0 TensorRT, @1 Torch, @2 TensorRT
    assert fills[0] != fills[2] and {fills[0], fills[2]} == set(FILLS[Target.TENSORRT])
    assert fills[1] in FILLS[Target.TORCH]


def test_layout_rows_are_topological_depth():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(aten.relu.default, (x,))
    b = graph.call_function(aten.neg.default, (a,))
    c = graph.call_function(aten.add.Tensor, (x, b))  # a skip edge: row 3, not 1
    graph.output(c)
    rows = {node.name: row for node, (row, _) in layout(list(graph.nodes)).items()}
    assert rows == {"x": 0, "relu_default": 1, "neg_default": 2, "add_tensor": 3, "output": 4}


def _wide_and_deep(width: int, depth: int) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    heads = [x] * width
    for _ in range(depth):
        heads = [graph.call_function(aten.relu.default if i % 3 else aten.lgamma.default, (h,)) for i, h in enumerate(heads)]
    graph.output(tuple(heads))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.slow
def test_a_large_graph_renders_in_linear_time():
    measured = {}
    for depth in (100, 400):  # 1,000 and 4,000 nodes
        partition = trtcheck.partition(_wide_and_deep(10, depth), (torch.rand(4),), trtcheck.Settings(min_block_size=1))
        seconds = []
        for _ in range(3):  # the best of three: the cores are shared
            start = time.perf_counter()
            page = partition_html(partition)
            seconds.append(time.perf_counter() - start)
        measured[depth] = (min(seconds), len(page))
    (small_s, small_len), (large_s, large_len) = measured[100], measured[400]
    assert large_len < 4.5 * small_len  # 4x the nodes: about 4x the page
    assert large_s < 8 * small_s + 0.05, f"4x the nodes took {large_s / small_s:.1f}x the time: quadratic somewhere"
    assert large_s < 5.0, f"4,000 nodes took {large_s:.1f} s to render"


def test_the_cli_writes_the_page(tmp_path, capsys):
    out = tmp_path / "seed.html"
    assert main(["partition", "seed_lgamma", "--min-block-size", "1", "--html", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert "<h1>trtcheck partition seed_lgamma</h1>" in out.read_text()


def test_an_unwritable_html_path_is_a_usage_error(tmp_path, capsys):
    assert main(["partition", "seed_lgamma", "--html", str(tmp_path / "no" / "such" / "dir.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trtcheck: error: cannot write") and "Traceback" not in err


@pytest.mark.skipif(
    screenshot_report.find_browser() is None, reason="no chromium on PATH: the page is not rendered (apt-get install -y chromium)"
)
@pytest.mark.slow
def test_the_page_renders_both_targets_in_chromium(seed_partition, tmp_path):
    from matplotlib.image import imread

    page = tmp_path / "seed.html"
    page.write_text(partition_html(seed_partition, "seed"))
    pixels = imread(screenshot_report.screenshot(page, tmp_path / "shot.png", width=1400, height=1000))[..., :3]
    # Segment @0 runs in TensorRT and @1 in Torch: each fill covers at least one whole node box (210x38 px),
    # which only a parsed and painted SVG gives (the legend's swatches are 14x14).
    for color in (FILLS[Target.TENSORRT][0], FILLS[Target.TORCH][0]):
        red, green, blue = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
        close = (abs(pixels[..., 0] - red) < 0.02) & (abs(pixels[..., 1] - green) < 0.02) & (abs(pixels[..., 2] - blue) < 0.02)
        assert close.sum() > 5000, color


class _Block(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1  # LINE_OF_BLOCK


class _Sourced(torch.nn.Module):
    """A module path with HTML in it (a ``ModuleDict`` key may hold any character but '.'): the page escapes it."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleDict({"b<0>&": _Block()})

    def forward(self, x):
        return self.blocks["b<0>&"](x).sigmoid()  # LINE_OF_MODEL


def _line(marker: str) -> int:
    with open(__file__) as file:
        return next(number for number, text in enumerate(file, 1) if text.rstrip().endswith(marker))


def test_tooltips_and_torch_reasons_name_each_node_s_source_escaped():
    """Issue 43: every fallback reason names the user's source, on the page as in ``explain``: each node's tooltip
    ends with ``from <module path> (<class>), file:line``, and the Torch nodes by reason are listed by source."""
    partition = trtcheck.partition(_Sourced().eval(), (torch.randn(2, 4),),
                                   trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu", "aten::sigmoid"]))
    page = partition_html(partition)
    block, model = f"{__file__}:{_line('LINE_OF_BLOCK')}", f"{__file__}:{_line('LINE_OF_MODEL')}"
    titles = re.findall(r"<g class=\"node\" data-segment=\"\d*\"><title>([^<]*)</title>", page)
    by_name = {text.split("\n")[0]: text for text in titles}
    assert by_name["relu"].endswith(f"\nfrom blocks.b&lt;0&gt;&amp; (_Block), {block}"), by_name["relu"]
    assert by_name["add"].endswith(f"\nfrom blocks.b&lt;0&gt;&amp; (_Block), {block}"), by_name["add"]  # TensorRT too
    assert by_name["sigmoid"].endswith(f"\nfrom the model itself (_Sourced), {model}"), by_name["sigmoid"]
    assert "from" not in by_name["x"] + by_name["output"]
    reasons = page[page.index("Torch nodes by reason"):]
    assert (f"<span class=names>relu</span> <span class=source>from blocks.b&lt;0&gt;&amp; (_Block), {block}</span>"
            in reasons), reasons
    assert f"<span class=names>sigmoid</span> <span class=source>from the model itself (_Sourced), {model}</span>" in reasons
    assert "b<0>" not in page
