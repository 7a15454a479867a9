"""Reading pytest-benchmark JSON files back into runs of trtcheck benchmark groups.

A run is one ``pytest --benchmark-json`` file. Its trtcheck benchmarks (those whose ``extra_info`` was
written by ``trtcheck.benchmarking.extra_info``) pair up into groups, one eager and one stitched
benchmark per model and preset. Everything else in the file is counted, not read: a project may keep
other benchmarks in the same session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trtcheck.benchmarking import SCHEMA_VERSION, VARIANTS, preset_label
from trtcheck.errors import ReportError
from trtcheck.report.statistics import Spread


@dataclass(frozen=True)
class Machine:
    """Where a run was measured; two runs are comparable only when their ``identity`` is equal."""

    node: str
    processor: str
    arch: str
    python: str
    cores: int | None

    @property
    def identity(self) -> tuple[str, str, str]:
        """Host name, CPU model and architecture: what decides whether timings can be compared."""
        return (self.node, self.processor, self.arch)

    def describe(self) -> str:
        cores = f", {self.cores} cores" if self.cores else ""
        return f"{self.node} ({self.processor or 'unknown CPU'}, {self.arch}{cores}, Python {self.python})"


@dataclass(frozen=True)
class Commit:
    """The commit pytest-benchmark found in the working directory of the run."""

    id: str
    branch: str
    dirty: bool
    time: str | None

    def describe(self) -> str:
        is_sha = len(self.id) >= 12 and all(c in "0123456789abcdef" for c in self.id.lower())
        short = self.id[:10] if is_sha else (self.id or "unknown")
        return f"{short} on {self.branch or 'unknown branch'}{' (dirty)' if self.dirty else ''}"


@dataclass(frozen=True)
class Group:
    """One model under one preset in one run: its eager and stitched medians and the compile it timed.

    The partition facts (segments, boundaries, compile times, ...) describe the stitched module; both
    variants carry them, so they are read from whichever benchmark has them. Every field may be None
    when the file lacks it (a group whose stitched benchmark failed has no stitched median).
    """

    model: str
    preset: str
    backend: str | None
    eager_median: float | None
    stitched_median: float | None
    segments_tensorrt: int | None
    segments_torch: int | None
    boundaries: int | None
    boundary_bytes: int | None
    compile_times: Mapping[str, float]
    fallbacks: int | None
    equivalence: Mapping[str, Any] | None
    denormals_flushed: bool | None
    profile: Mapping[str, Any] | None = None
    """Where a stitched call spends its time (``trtcheck.profile(...).to_dict()``: ``total_s``, ``engine_s``,
    ``torch_s``, ``boundary_s``, ``boundaries``, ``per_boundary_s``, ``segments``); None in files written
    before benchmarks recorded it, or when it is malformed (the run's notes say so)."""
    stitched_spread: Spread | None = None
    """The stitched benchmark's quartiles and rounds (``Spread``), which the regression check tests."""
    precision: str = "fp32"
    """``Settings.precision`` of the compiled module (files written before benchmarks recorded it: fp32). A group
    below fp32 is its own group: its ``preset`` reads ``{preset}-{precision}`` (``benchmarking.preset_label``)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.preset)

    @property
    def label(self) -> str:
        """``model/preset``: how plots and tables name the group."""
        return f"{self.model}/{self.preset}"

    @property
    def speedup(self) -> float | None:
        """Eager median over stitched median: above 1 means the stitched module is faster."""
        if self.eager_median is None or not self.stitched_median:
            return None
        return self.eager_median / self.stitched_median

    @property
    def segments_total(self) -> int | None:
        if self.segments_tensorrt is None or self.segments_torch is None:
            return None
        return self.segments_tensorrt + self.segments_torch

    @property
    def compile_seconds(self) -> float | None:
        return sum(self.compile_times.values()) if self.compile_times else None

    def profile_seconds(self, name: str) -> float | None:
        """One time of the profile, in seconds per call (``"engine_s"``, ``"boundary_s"``, ...), or None."""
        value = (self.profile or {}).get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def per_boundary_seconds(self) -> float | None:
        """Boundary overhead per value crossing a segment boundary (seconds per call); None without a profile."""
        return self.profile_seconds("per_boundary_s")

    @property
    def equivalence_passed(self) -> bool | None:
        """None when the benchmark recorded no equivalence check (it is optional in the schema)."""
        if self.equivalence is None or "passed" not in self.equivalence:
            return None
        return bool(self.equivalence["passed"])


@dataclass(frozen=True)
class Run:
    """One benchmark file: when and where it ran, and its trtcheck groups in file order."""

    path: Path
    datetime: datetime
    machine: Machine
    commit: Commit
    groups: tuple[Group, ...]
    ignored: int = 0
    notes: tuple[str, ...] = field(default=())

    def group(self, model: str, preset: str) -> Group | None:
        return next((g for g in self.groups if g.key == (model, preset)), None)

    @property
    def label(self) -> str:
        """The run's time and file name: unique enough for a legend or a table row."""
        return f"{self.datetime:%Y-%m-%d %H:%M} {self.path.name}"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"{path}: cannot be read ({error})") from None
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: not JSON ({error}); expected a file written by pytest --benchmark-json") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ReportError(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks' list); write one with pytest --benchmark-json=FILE")
    return data


def _parse_datetime(path: Path, value: Any) -> datetime:
    try:
        stamp = datetime.fromisoformat(str(value))
    except ValueError:
        raise ReportError(f"{path}: 'datetime' is {value!r}, not an ISO date; runs are ordered by it") from None
    # pytest-benchmark writes UTC with an offset; a naive stamp is taken as UTC, and every stamp is shown
    # in UTC, so runs from machines in different time zones line up.
    return stamp.astimezone(UTC) if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _machine(info: Mapping[str, Any]) -> Machine:
    cpu = info.get("cpu") or {}
    return Machine(
        node=str(info.get("node") or "unknown"),
        processor=str(cpu.get("brand_raw") or info.get("processor") or ""),
        arch=str(info.get("machine") or ""),
        python=str(info.get("python_version") or ""),
        cores=cpu.get("count"),
    )


def _commit(info: Mapping[str, Any]) -> Commit:
    return Commit(
        id=str(info.get("id") or ""),
        branch=str(info.get("branch") or ""),
        dirty=bool(info.get("dirty")),
        time=info.get("time"),
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _spread(path: Path, benchmark: Mapping[str, Any]) -> Spread:
    """The benchmark's median and quartiles, and its rounds where the file kept them (``--benchmark-save-data``):
    what tells a real slowdown from noise (``trtcheck.report.statistics``)."""
    stats = benchmark.get("stats") or {}
    median = _number(stats.get("median"))
    if median is None:
        raise ReportError(f"{path}: benchmark {benchmark.get('fullname') or benchmark.get('name')!r} has no stats.median")
    data = stats.get("data")
    rounds = tuple(float(v) for v in data) if isinstance(data, list) and all(_number(v) is not None for v in data) and data else None
    return Spread(median, _number(stats.get("q1")), _number(stats.get("q3")), rounds)


def _first(values: Iterable[Any]) -> Any:
    return next((v for v in values if v is not None), None)


PROFILE_TIMES = ("total_s", "engine_s", "torch_s", "boundary_s", "per_boundary_s")


def _profile(value: Any) -> Mapping[str, Any] | None | str:
    """The recorded profile if it is well formed, None if there is none, or why it is not usable."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"is a {type(value).__name__}, not an object"
    bad = [name for name in PROFILE_TIMES if not isinstance(value.get(name), (int, float)) or isinstance(value.get(name), bool)]
    if bad:
        return f"has no number for {', '.join(bad)}"
    return dict(value)


def _group(model: str, preset: str, by_variant: Mapping[str, tuple[Spread, Mapping[str, Any]]], notes: list[str] | None = None) -> Group:
    infos = [by_variant[v][1] for v in ("stitched", "eager") if v in by_variant]
    profile = _profile(_first(info.get("profile") for info in infos))
    if isinstance(profile, str):
        if notes is not None:
            notes.append(f"{model}/{preset}: its profile {profile}; shown as n/a")
        profile = None
    segments = _first(info.get("segments") for info in infos) or {}
    return Group(
        model=model,
        preset=preset,
        backend=_first(info.get("backend") for info in infos),
        eager_median=by_variant["eager"][0].median if "eager" in by_variant else None,
        stitched_median=by_variant["stitched"][0].median if "stitched" in by_variant else None,
        segments_tensorrt=segments.get("tensorrt"),
        segments_torch=segments.get("torch"),
        boundaries=_first(info.get("boundaries") for info in infos),
        boundary_bytes=_first(info.get("boundary_bytes") for info in infos),
        compile_times=dict(_first(info.get("compile_times") for info in infos) or {}),
        fallbacks=_first(info.get("fallbacks") for info in infos),
        equivalence=_first(info.get("equivalence") for info in infos),
        denormals_flushed=_first(info.get("denormals_flushed") for info in infos),
        profile=profile,
        stitched_spread=by_variant["stitched"][0] if "stitched" in by_variant else None,
        precision=str(_first(info.get("precision") for info in infos) or "fp32"),
    )


def preset_key(info: Mapping[str, Any]) -> str:
    """A benchmark's preset as the report groups it: the preset, with ``-fp16``/``-bf16`` when its precision is reduced
    (``benchmarking.preset_label``), so that a preset's precisions are separate groups (a fp32 run's keep their names)."""
    return preset_label(str(info["preset"]), str(info.get("precision") or "fp32"))


def load_run(path: str | Path) -> Run:
    """Read one pytest-benchmark JSON file; ``ReportError`` when it holds no trtcheck benchmark."""
    path = Path(path)
    data = _read_json(path)
    notes: list[str] = []
    ignored = 0
    other_schema = 0
    variants: dict[tuple[str, str], dict[str, tuple[Spread, Mapping[str, Any]]]] = {}
    for benchmark in data["benchmarks"]:
        info = benchmark.get("extra_info") if isinstance(benchmark, dict) else None
        if not isinstance(info, dict) or "trtcheck_schema" not in info:
            ignored += 1
            continue
        if info["trtcheck_schema"] != SCHEMA_VERSION:
            other_schema += 1
            continue
        name = benchmark.get("fullname") or benchmark.get("name")
        try:
            key, variant = (str(info["model"]), preset_key(info)), str(info["variant"])
        except KeyError as missing:
            raise ReportError(f"{path}: benchmark {name!r} has trtcheck extra_info without {missing}") from None
        if variant not in VARIANTS:
            raise ReportError(f"{path}: benchmark {name!r} has variant {variant!r}; expected one of {', '.join(VARIANTS)}")
        group = variants.setdefault(key, {})
        if variant in group:
            notes.append(f"{key[0]}/{key[1]} has more than one {variant} benchmark: {name} was ignored, the first one read is used")
            continue
        group[variant] = (_spread(path, benchmark), info)
    if other_schema:
        notes.append(f"{other_schema} benchmark(s) use a trtcheck_schema other than {SCHEMA_VERSION} and were skipped")
    if ignored:
        notes.append(f"{ignored} benchmark(s) without trtcheck extra_info were ignored")
    if not variants:
        raise ReportError(
            f"{path}: no trtcheck benchmarks ({len(data['benchmarks'])} benchmark(s), "
            f"{other_schema} with an unsupported trtcheck_schema); record them with "
            "benchmark.extra_info.update(trtcheck.benchmarking.extra_info(...))"
        )
    for (model, preset), group in variants.items():
        missing = [v for v in VARIANTS if v not in group]
        if missing:
            notes.append(f"{model}/{preset} has no {' or '.join(missing)} benchmark")
    groups = tuple(_group(model, preset, group, notes) for (model, preset), group in variants.items())
    return Run(
        path=path,
        datetime=_parse_datetime(path, data.get("datetime")),
        machine=_machine(data.get("machine_info") or {}),
        commit=_commit(data.get("commit_info") or {}),
        groups=groups,
        ignored=ignored + other_schema,
        notes=tuple(notes),
    )


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Read every file, oldest run first (by the ``datetime`` pytest-benchmark stamped on it)."""
    runs = [load_run(path) for path in paths]
    if not runs:
        raise ReportError("no benchmark files given")
    return sorted(runs, key=lambda run: run.datetime)
