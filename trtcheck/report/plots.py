"""The report's plots, drawn with matplotlib's Agg canvas into PNG files.

Figures are built with ``matplotlib.figure.Figure`` and an explicit ``FigureCanvasAgg`` rather than
``pyplot``: the report must not switch the backend or leave figures open in a caller's process (a
notebook, a pytest session). matplotlib is an optional dependency (``trtcheck[report]``), imported only
when a report is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trtcheck.atomic import atomic_write
from trtcheck.errors import ReportError
from trtcheck.report.analysis import format_speedup
from trtcheck.report.runs import Group, Run

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TENSORRT_COLOR = "#76b900"  # TensorRT segments: NVIDIA green
TORCH_COLOR = "#ee4c2c"  # Torch segments: PyTorch orange
BOUNDARY_COLOR = "#7f7f7f"  # boundary overhead: grey, time that is neither engine nor Torch work
LOG_SPAN = 20.0  # a value axis spanning more than this factor is drawn in log scale
LEGEND_ROWS = 45  # the most rows of one legend column of the latency history
PALETTE_SIZE = 10  # colours of matplotlib's tab10, which _palette cycles through
MARKERS = "os^Dv<>ph*"  # with more lines than colours, each PALETTE_SIZE lines get the next marker
SPEEDUP_MODELS_PER_ROW = 8  # models per row of the speedup plot


@dataclass(frozen=True)
class Plot:
    """One drawn plot: where its PNG is, and the words that go with it in the report."""

    name: str
    title: str
    caption: str
    path: Path


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError("the report's plots need matplotlib: pip install 'trtcheck[report]'") from None
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _palette(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % PALETTE_SIZE) for i in range(count)]


def _log_scale_if_wide(axes, values: Sequence[float]) -> bool:
    """Log y axis when the values span more than ``LOG_SPAN``: one slow model must not flatten the rest.

    Its ticks read as plain numbers (``4``, ``0.5``, ``20``), minor ones too: matplotlib's default labelled a
    speedup axis ``4x10^0``.
    """
    positive = [v for v in values if v > 0]
    wide = bool(positive) and max(positive) / min(positive) > LOG_SPAN
    if wide:
        from matplotlib.ticker import FuncFormatter

        axes.set_yscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(plain)
    return wide


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda file: figure.savefig(file, format="png"))
    return path


def _models_and_presets(groups: Sequence[Group]) -> tuple[list[str], list[str]]:
    models = list(dict.fromkeys(g.model for g in groups))
    presets = list(dict.fromkeys(g.preset for g in groups))
    return models, presets


def plot_speedup(run: Run, path: Path) -> Plot:
    """Grouped bars: per model, one bar per preset, eager median / stitched median; a line at 1.0.

    At most ``SPEEDUP_MODELS_PER_ROW`` models per row of bars, rows stacked with one y scale: the whole zoo
    in one row made a figure 67 inches wide, shrunk to a strip in the report's page.
    """
    models, presets = _models_and_presets(run.groups)
    rows = [models[start:start + SPEEDUP_MODELS_PER_ROW] for start in range(0, len(models), SPEEDUP_MODELS_PER_ROW)] or [[]]
    columns = max(len(row) for row in rows)
    figure = _figure(max(6.0, 1.2 + 0.5 * columns * max(len(presets), 1)), 4.5 * len(rows))
    grid = figure.subplots(len(rows), 1, sharey=True, squeeze=False)[:, 0]
    width = 0.8 / max(len(presets), 1)
    values = [g.speedup for g in run.groups if g.speedup is not None]
    for axes, row in zip(grid, rows):
        for index, (preset, color) in enumerate(zip(presets, _palette(len(presets)))):
            xs, heights = [], []
            for position, model in enumerate(row):
                group = run.group(model, preset)
                if group is not None and group.speedup is not None:
                    xs.append(position - 0.4 + width * (index + 0.5))
                    heights.append(group.speedup)
            bars = axes.bar(xs, heights, width, label=preset, color=color)
            axes.bar_label(bars, labels=[format_speedup(h) for h in heights], fontsize=8, padding=2)
        axes.axhline(1.0, color="black", linestyle="--", linewidth=1, label="1.0 (as fast as eager)")
        axes.set_xticks(range(len(row)), row, rotation=20 if len(row) > 4 else 0, ha="right" if len(row) > 4 else "center")
        axes.set_xlim(-0.5, columns - 0.5)  # every row's models as wide as the first row's
        axes.set_ylabel("speedup (eager / stitched)")
        axes.grid(axis="y", alpha=0.3)
    if not _log_scale_if_wide(grid[0], values + [1.0]):  # the y axis is shared: one call scales every row
        grid[0].set_ylim(0, max(values + [1.0]) * 1.18)  # room for the bar labels
    grid[0].set_title(f"Speedup of stitched over eager, latest run ({run.datetime:%Y-%m-%d %H:%M})")
    grid[0].legend(title="preset", fontsize=8, loc="best")
    caption = "Above the dashed line the stitched module is faster than eager PyTorch."
    return Plot("speedup", "Speedup of stitched over eager", caption, _save(figure, path))


def plot_latency_history(runs: Sequence[Run], path: Path) -> Plot:
    """One line per model/preset: stitched median (ms) at each run, runs in datetime order."""
    labels = list(dict.fromkeys(g.label for run in runs for g in run.groups))
    # The legend sits right of the axes, one row per line: with the whole zoo (130+ lines) a fixed figure
    # left the axes no room at all. Columns of at most LEGEND_ROWS rows, each as wide as the longest label,
    # and the figure grows to hold them; lines past the palette's ten colours differ by marker.
    columns = max(1, -(-len(labels) // LEGEND_ROWS))
    rows = -(-len(labels) // columns)
    legend_width = columns * (0.6 + 0.065 * max((len(label) for label in labels), default=0))
    figure = _figure(max(7.0, 1.5 + 1.1 * len(runs)) + legend_width, max(4.8, 1.4 + 0.17 * rows))
    axes = figure.add_subplot()
    values = []
    for index, (label, color) in enumerate(zip(labels, _palette(len(labels)))):
        marker = MARKERS[index // PALETTE_SIZE % len(MARKERS)]
        xs, ys = [], []
        for position, run in enumerate(runs):
            group = next((g for g in run.groups if g.label == label), None)
            if group is not None and group.stitched_median is not None:
                xs.append(position)
                ys.append(group.stitched_median * 1e3)
        axes.plot(xs, ys, marker=marker, label=label, color=color)
        values.extend(ys)
    _log_scale_if_wide(axes, values)
    several_machines = len({run.machine.identity for run in runs}) > 1
    ticks = [f"{run.datetime:%Y-%m-%d\n%H:%M:%S}" + (f"\n{run.machine.node}" if several_machines else "") for run in runs]
    axes.set_xticks(range(len(runs)), ticks, fontsize=8)
    axes.set_xlim(-0.5, len(runs) - 0.5)
    axes.set_xlabel("run (UTC datetime" + (", machine" if several_machines else "") + ")")
    axes.set_ylabel("stitched median latency (ms)")
    axes.set_title("Stitched latency over time")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=columns)
    axes.grid(alpha=0.3)
    caption = "Lower is better. Runs are evenly spaced in datetime order."
    if several_machines:
        caption += " Runs come from different machines: a step between them is not a change in trtcheck."
    return Plot("latency_history", "Stitched latency over time", caption, _save(figure, path))


def _horizontal_stacked(
    run: Run,
    title: str,
    xlabel: str,
    stacks: list[tuple[str, str, list[float]]],
    path: Path,
    fmt: str,
    integer: bool = False,
    groups: Sequence[Group] | None = None,
    width: float = 9.0,
    ends: Sequence[str] = (),
) -> Path:
    """Horizontal stacked bars, one row per group (labels are long, so rows, not columns).

    The rows are ``groups`` when given (a subset of ``run.groups``), else every group of ``run``; ``ends``, one
    text per row, is written right of each bar (the absolute total of a relative view).
    """
    labels = [g.label for g in (run.groups if groups is None else groups)]
    figure = _figure(width, max(2.5, 1.3 + 0.45 * len(labels)))
    axes = figure.add_subplot()
    left = [0.0] * len(labels)
    totals = [sum(column) for column in zip(*(widths for _, _, widths in stacks))]
    readable = 0.06 * max(totals, default=0.0)  # narrower pieces get no number: it would not fit
    for name, color, widths in stacks:
        bars = axes.barh(labels, widths, left=left, label=name, color=color)
        axes.bar_label(bars, labels=[fmt.format(w) if w and w >= readable else "" for w in widths], label_type="center", fontsize=9)
        left = [a + b for a, b in zip(left, widths)]
    for row, (end, text) in enumerate(zip(left, ends)):
        axes.annotate(text, (end, row), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    if ends:
        axes.set_xlim(0, max(left, default=1.0) * 1.12)  # room for the texts
    # The first group on top, as in the table, and no margin: matplotlib's 5% of 130 rows left 6 empty rows.
    axes.set_ylim(len(labels) - 0.5, -0.5)
    if integer:
        from matplotlib.ticker import MaxNLocator

        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(xlabel)
    axes.set_title(title)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, path)


def plot_compile_times(run: Run, path: Path) -> Plot:
    """Stacked bars: seconds per compile phase (in the order ``CompileTimes`` records them) per group."""
    phases = list(dict.fromkeys(phase for g in run.groups for phase in g.compile_times))
    stacks = [
        (phase, color, [float(g.compile_times.get(phase, 0.0)) for g in run.groups])
        for phase, color in zip(phases, _palette(len(phases)))
    ]
    saved = _horizontal_stacked(run, "Compile time by phase, latest run", "seconds", stacks, path, "{:.2f}")
    return Plot("compile_times", "Compile time by phase", "Where trtcheck.compile spends its time, per model and preset.", saved)


def plot_segments(run: Run, path: Path) -> Plot:
    """Stacked bars: TensorRT and Torch segments per group."""
    stacks = [
        ("TensorRT", TENSORRT_COLOR, [float(g.segments_tensorrt or 0) for g in run.groups]),
        ("Torch", TORCH_COLOR, [float(g.segments_torch or 0) for g in run.groups]),
    ]
    saved = _horizontal_stacked(run, "Segments, latest run", "segments", stacks, path, "{:.0f}", integer=True)
    return Plot("segments", "Segments per model", "Every Torch segment between TensorRT segments adds engine boundaries.", saved)


def plot_time_breakdown(run: Run, path: Path) -> Plot | None:
    """Stacked bars: the share of one stitched call spent in engines, Torch and boundaries, per group with a
    profile, each bar 100% of its own call and the call's time written at its end.

    Relative, not absolute: on one time axis a model of 0.05 ms drew no visible bar next to resnet18's 20 ms.
    None when no group of ``run`` has a profile (files written before benchmarks recorded one).
    """
    groups = [g for g in run.groups if g.profile is not None]
    if not groups:
        return None
    parts = (("engine", TENSORRT_COLOR, "engine_s"), ("Torch", TORCH_COLOR, "torch_s"), ("boundary overhead", BOUNDARY_COLOR, "boundary_s"))
    # A negative boundary time (timer noise on a call with no crossing) would draw backwards: clamp it.
    seconds = [(name, color, [max(0.0, g.profile_seconds(key) or 0.0) for g in groups]) for name, color, key in parts]
    totals = [sum(column) for column in zip(*(values for _, _, values in seconds))]
    stacks = [(name, color, [100.0 * v / t if t else 0.0 for v, t in zip(values, totals)]) for name, color, values in seconds]
    saved = _horizontal_stacked(
        run, "Where a stitched call spends its time, latest run", "% of the call", stacks, path, "{:.0f}%", groups=groups,
        width=12.0, ends=[format_seconds(total) for total in totals],
    )
    caption = (
        "One call of the stitched module (trtcheck.profile: the call with the median total of 20), as shares of "
        "that call: time inside the engines, in Torch segments, and the overhead of crossing between them (input "
        "checks, binding, copies, Python calls); the call's time is at the end of each bar."
    )
    missing = len(run.groups) - len(groups)
    if missing:
        caption += f" {missing} group(s) recorded no profile and are not shown."
    return Plot("time_breakdown", "Where the time goes", caption, saved)


def draw_all(runs: Sequence[Run], directory: Path) -> list[Plot]:
    """The plots of a report: latest run's speedup, latency history, compile phases, segments, and where
    a stitched call's time goes (when the latest run recorded profiles)."""
    latest = runs[-1]
    plots = [
        plot_speedup(latest, directory / "speedup.png"),
        plot_latency_history(runs, directory / "latency_history.png"),
        plot_compile_times(latest, directory / "compile_times.png"),
        plot_segments(latest, directory / "segments.png"),
        plot_time_breakdown(latest, directory / "time_breakdown.png"),
    ]
    return [plot for plot in plots if plot is not None]


def format_seconds(seconds: float) -> str:
    """``0.0203`` -> ``"20.3 ms"``, ``4.5e-05`` -> ``"45 µs"``: a call's time in the unit that reads at a glance."""
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"
