"""Where the time goes: the profile a stitched benchmark records, and how the report shows it.

The benchmark files come from real runs (``report_runs``), whose stitched benchmarks record
``trtcheck.profile(stitched, inputs).to_dict()`` in ``extra_info["profile"]``; files written before that
(no ``profile`` key) must still load, with ``n/a`` where the profile would be.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from trtcheck.benchmarking import extra_info
from trtcheck.report import load_run, load_runs, summarize, write_report
from trtcheck.report.plots import BOUNDARY_COLOR, TENSORRT_COLOR, TORCH_COLOR
from trtcheck.report.render import BOUNDARY_OVERHEAD, COLUMNS, table_rows

PROFILE_KEYS = {"total_s", "engine_s", "torch_s", "boundary_s", "boundaries", "per_boundary_s", "segments"}


def _without_profiles(data):
    for benchmark in data["benchmarks"]:
        benchmark["extra_info"].pop("profile", None)


def _cell(row, column):
    return row.cells[COLUMNS.index(column)]


def test_extra_info_records_the_profile_only_when_given():
    profile = {
        "total_s": 3e-4, "engine_s": 1e-4, "torch_s": 1e-4, "boundary_s": 1e-4, "boundaries": 4, "per_boundary_s": 2.5e-5, "segments": [],
    }
    info = extra_info("m", "p", "stitched", "onnxruntime", None, profile=profile)
    assert info["profile"] == profile and info["profile"] is not profile
    assert "profile" not in extra_info("m", "p", "eager", "onnxruntime", None)


def test_a_real_run_records_where_each_stitched_call_spends_its_time(bench_files):
    data = json.loads(bench_files["baseline"].read_text())
    trtcheck_benchmarks = [b for b in data["benchmarks"] if b["extra_info"]]
    assert {b["extra_info"]["variant"] for b in trtcheck_benchmarks if "profile" in b["extra_info"]} == {"stitched"}
    run = load_run(bench_files["baseline"])
    for group in run.groups:
        profile = group.profile
        assert profile is not None and set(profile) == PROFILE_KEYS, group.label
        assert profile["engine_s"] > 0 and profile["torch_s"] > 0  # lgamma runs in Torch, the rest in an engine
        # The three parts are one call's total, split (trtcheck.profile takes one whole run, the median one).
        assert profile["engine_s"] + profile["torch_s"] + profile["boundary_s"] == pytest.approx(profile["total_s"], rel=1e-6)
        assert profile["boundaries"] == group.boundaries  # counted as the benchmark's boundary_traffic counts
        assert group.per_boundary_seconds == pytest.approx(profile["boundary_s"] / profile["boundaries"])
        assert [s["target"] for s in profile["segments"]].count("tensorrt") == group.segments_tensorrt


def test_the_report_has_the_time_plot_and_the_boundary_overhead_column(bench_files, tmp_path):
    result = write_report(load_runs([bench_files["baseline"], bench_files["changed"]]), tmp_path / "out")
    plot = next(p for p in result.plots if p.name == "time_breakdown")
    assert plot.path == tmp_path / "out" / "time_breakdown.png" and plot.path.stat().st_size > 0
    assert 'id="plot-time_breakdown"' in result.html.read_text()
    assert "(time_breakdown.png)" in result.markdown.read_text()
    rows = table_rows(result.summary)
    for group, row in zip(result.summary.latest.groups, rows):
        assert _cell(row, BOUNDARY_OVERHEAD) == f"{group.per_boundary_seconds * 1e6:.1f}"
    page = result.html.read_text()
    assert f"<th>{BOUNDARY_OVERHEAD}</th>" in page
    assert f'<td class="num">{_cell(rows[0], BOUNDARY_OVERHEAD)}</td>' in page


def test_an_older_file_without_profiles_loads_and_shows_n_a(bench_files, derive, tmp_path):
    old = derive(bench_files["baseline"], "before_profiles.json", _without_profiles)
    run = load_run(old)
    assert [g.label for g in run.groups] == [g.label for g in load_run(bench_files["baseline"]).groups]
    assert all(g.profile is None and g.per_boundary_seconds is None for g in run.groups)
    result = write_report([run], tmp_path / "out")
    assert "time_breakdown" not in [p.name for p in result.plots]  # no empty plot
    assert all(_cell(row, BOUNDARY_OVERHEAD) == "n/a" for row in table_rows(result.summary))
    assert any("no time profile" in note and "its groups" in note for note in result.summary.notes)


def test_a_malformed_profile_is_noted_and_left_out(bench_files, derive):
    def break_one(data):
        for benchmark in data["benchmarks"]:
            info = benchmark["extra_info"]
            if info.get("model") == "seed_lgamma" and info.get("preset") == "torch_add" and "profile" in info:
                info["profile"] = {"total_s": "fast"}

    run = load_run(derive(bench_files["baseline"], "bad_profile.json", break_one))
    assert run.group("seed_lgamma", "torch_add").profile is None
    assert run.group("seed_lgamma", "min_block_size_1").profile is not None
    assert any("seed_lgamma/torch_add: its profile has no number for total_s" in note for note in run.notes)
    notes = summarize([run]).notes
    assert any("no time profile" in note and "seed_lgamma/torch_add" in note for note in notes)


def test_a_group_where_nothing_crosses_shows_none(bench_files):
    (run,) = load_runs([bench_files["baseline"]])
    first = run.groups[0]
    nothing = dataclasses.replace(first, profile={**first.profile, "boundaries": 0, "per_boundary_s": 0.0})
    rows = table_rows(summarize([dataclasses.replace(run, groups=(nothing, *run.groups[1:]))]))
    assert _cell(rows[0], BOUNDARY_OVERHEAD) == "none"


def _color_pixels(pixels, color: str) -> int:
    red, green, blue = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    rgb = pixels[..., :3]
    return int(((abs(rgb[..., 0] - red) < 0.02) & (abs(rgb[..., 1] - green) < 0.02) & (abs(rgb[..., 2] - blue) < 0.02)).sum())


def test_the_stacked_bars_are_as_long_as_the_times(bench_files, derive, tmp_path):
    """Every group 1 ms engine, 2 ms Torch, 3 ms boundary: the colored areas of the PNG are 1:2:3."""
    from matplotlib.image import imread

    def set_times(data):
        for benchmark in data["benchmarks"]:
            if "profile" in benchmark["extra_info"]:
                benchmark["extra_info"]["profile"].update(total_s=6e-3, engine_s=1e-3, torch_s=2e-3, boundary_s=3e-3)

    result = write_report([load_run(derive(bench_files["baseline"], "set_times.json", set_times))], tmp_path / "out")
    pixels = imread(next(p for p in result.plots if p.name == "time_breakdown").path)
    engine, torch_, boundary = (_color_pixels(pixels, c) for c in (TENSORRT_COLOR, TORCH_COLOR, BOUNDARY_COLOR))
    assert engine > 3000  # three rows of bars, not only the legend's patches
    assert torch_ / engine == pytest.approx(2, rel=0.15)
    assert boundary / engine == pytest.approx(3, rel=0.15)


def _bar_widths(pixels, color: str) -> list[int]:
    """The width in pixels of each horizontal bar drawn in ``color``, top to bottom (legend patches excluded)."""
    red, green, blue = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    rgb = pixels[..., :3]
    mask = (abs(rgb[..., 0] - red) < 0.02) & (abs(rgb[..., 1] - green) < 0.02) & (abs(rgb[..., 2] - blue) < 0.02)
    widths, current = [], 0
    for row in mask.sum(axis=1):
        if row:
            current = max(current, int(row))
        elif current:
            widths.append(current)
            current = 0
    return [w for w in widths if w > 30]  # the legend's patch is ~20 px wide


def test_a_fast_model_gets_a_bar_as_visible_as_a_slow_ones(bench_files, derive, tmp_path):
    """One group's call 400x longer than the others (20 ms beside 50 µs): every bar still shows its shares."""
    from matplotlib.image import imread

    def one_slow(data):
        profiled = [b for b in data["benchmarks"] if "profile" in b["extra_info"]]
        for index, benchmark in enumerate(profiled):
            scale = 400.0 if index == 0 else 1.0
            benchmark["extra_info"]["profile"].update(total_s=5e-5 * scale, engine_s=5e-5 * scale, torch_s=0.0, boundary_s=0.0)

    result = write_report([load_run(derive(bench_files["baseline"], "one_slow.json", one_slow))], tmp_path / "out")
    widths = _bar_widths(imread(next(p for p in result.plots if p.name == "time_breakdown").path), TENSORRT_COLOR)
    assert len(widths) >= 3 and min(widths) > 0.9 * max(widths), widths


def test_a_log_axis_labels_its_ticks_as_plain_numbers():
    """Not matplotlib's "4x10^0" on a speedup axis."""
    from trtcheck.report import plots

    axes = plots._figure(4, 3).add_subplot()
    assert plots._log_scale_if_wide(axes, [0.1, 1.0, 40.0])
    assert axes.yaxis.get_minor_formatter()(4.0, 0) == "4" and axes.yaxis.get_major_formatter()(0.1, 0) == "0.1"
