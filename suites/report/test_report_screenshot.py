"""The HTML report rendered by a real browser: the page shows its plots (needs Chromium).

Skipped, with the reason printed by ``pytest -rs``, where no Chromium is installed; the HTML checks that
need no browser are in test_report_output.py.
"""

from __future__ import annotations

import pytest

from suites.benchmarks import screenshot_report
from trtcheck.report import load_runs, write_report
from trtcheck.report.plots import TENSORRT_COLOR

pytestmark = pytest.mark.skipif(
    screenshot_report.find_browser() is None,
    reason="no chromium on PATH: the rendered report is not checked (apt-get install -y chromium)",
)


@pytest.mark.slow
def test_the_rendered_report_shows_the_plots(bench_files, tmp_path):
    from matplotlib.image import imread

    result = write_report(load_runs([bench_files["baseline"], bench_files["changed"]]), tmp_path / "report")
    shot = screenshot_report.screenshot(result.html, tmp_path / "shot.png", width=1400, height=2400)
    pixels = imread(shot)
    assert pixels.shape[:2] == (2400, 1400)
    # The segments plot's TensorRT bars are drawn in TENSORRT_COLOR, which nothing else on the page uses:
    # finding it proves the embedded plots were decoded and painted, not just that the page loaded.
    red, green, blue = (int(TENSORRT_COLOR[i : i + 2], 16) / 255 for i in (1, 3, 5))
    rgb = pixels[..., :3]
    matches = (abs(rgb[..., 0] - red) < 0.02) & (abs(rgb[..., 1] - green) < 0.02) & (abs(rgb[..., 2] - blue) < 0.02)
    assert matches.sum() > 1000


def _many_long_named_groups(data):
    """Each benchmark copied under 12 long model names: a zoo-sized table, as wide as real names make it."""
    copies = []
    for index in range(12):
        for benchmark in data["benchmarks"]:
            copy = dict(benchmark, extra_info=dict(benchmark["extra_info"]))
            copy["extra_info"]["model"] = f"transformer_encoder_dynamic_seq_{index}_{benchmark['extra_info'].get('model', '')}"
            copies.append(copy)
    data["benchmarks"] = copies


@pytest.mark.parametrize("width", [1400, 400])  # a laptop's window and a phone's
@pytest.mark.slow
def test_nothing_overflows_the_page_sideways(bench_files, derive, tmp_path, width):
    """The summary table (its regression column last) and the plots stay inside the page: the right margin is blank."""
    from matplotlib.image import imread

    runs = [derive(bench_files[name], f"{name}.json", _many_long_named_groups) for name in ("baseline", "changed")]
    result = write_report(load_runs(runs), tmp_path / "report")
    assert "REGRESSED" in result.html.read_text()  # the widest column is there to overflow
    pixels = imread(screenshot_report.screenshot(result.html, tmp_path / f"shot{width}.png", width=width, height=3000))
    margin = pixels[:, width - 18:, :3]  # right of the body's 24 px margin
    assert (margin > 0.97).all(), f"something is drawn in the right margin at {width} px"
