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
