"""Loading pytest-benchmark JSON written by real benchmark runs of compiled zoo models."""

from __future__ import annotations

import dataclasses
import json
import platform

import pytest

import trtcheck
from trtcheck.report import ReportError, load_run, load_runs


def test_a_real_run_loads_every_group_with_its_partition_facts(bench_files):
    run = load_run(bench_files["baseline"])
    expected = [("seed_lgamma", "min_block_size_1"), ("seed_lgamma", "torch_add"), ("residual_unsupported", "min_block_size_1")]
    assert [g.label for g in run.groups] == [f"{m}/{p}" for m, p in expected]
    phases = [field.name for field in dataclasses.fields(trtcheck.CompileTimes)]
    for group in run.groups:
        assert group.eager_median > 0 and group.stitched_median > 0
        assert group.segments_tensorrt >= 1 and group.segments_torch >= 1  # lgamma has no converter
        assert list(group.compile_times) == phases
        assert group.equivalence_passed is True
        assert group.backend == "onnxruntime"
    assert run.machine.node == platform.node()
    assert run.machine.arch == platform.machine()


def test_medians_are_read_from_the_stats_of_each_variant(bench_files):
    data = json.loads(bench_files["baseline"].read_text())
    medians = {
        (b["extra_info"]["model"], b["extra_info"]["preset"], b["extra_info"]["variant"]): b["stats"]["median"]
        for b in data["benchmarks"]
        if b["extra_info"]
    }
    for group in load_run(bench_files["baseline"]).groups:
        assert group.eager_median == medians[(group.model, group.preset, "eager")]
        assert group.stitched_median == medians[(group.model, group.preset, "stitched")]


def test_other_benchmarks_are_ignored_but_counted(bench_files):
    run = load_run(bench_files["baseline"])
    assert run.ignored == 1  # test_not_trtcheck
    assert any("1 benchmark(s) without trtcheck extra_info were ignored" in note for note in run.notes)


def test_runs_are_ordered_by_datetime_not_by_argument_order(bench_files):
    runs = load_runs([bench_files["other_machine"], bench_files["baseline"], bench_files["changed"]])
    assert runs[0].path == bench_files["baseline"]
    assert [r.datetime for r in runs] == sorted(r.datetime for r in runs)


def test_the_machine_hook_of_a_run_is_what_the_report_sees(bench_files):
    assert load_run(bench_files["other_machine"]).machine.node == "some-other-host"


def test_a_group_without_its_stitched_benchmark_has_no_speedup(bench_files, derive):
    def drop_stitched(data):
        data["benchmarks"] = [
            b for b in data["benchmarks"] if b["extra_info"].get("variant") != "stitched" or b["extra_info"]["model"] != "seed_lgamma"
        ]

    run = load_run(derive(bench_files["baseline"], "no_stitched.json", drop_stitched))
    group = run.group("seed_lgamma", "min_block_size_1")
    assert group.stitched_median is None and group.speedup is None
    assert group.segments_total is not None  # the eager variant carries the partition facts too
    assert any("seed_lgamma/min_block_size_1 has no stitched benchmark" in note for note in run.notes)


def test_benchmarks_of_another_schema_version_are_skipped_with_a_note(bench_files, derive):
    def bump(data):
        data["benchmarks"][0]["extra_info"]["trtcheck_schema"] = 99

    run = load_run(derive(bench_files["baseline"], "schema.json", bump))
    assert run.ignored == 2
    assert any("trtcheck_schema other than 1" in note for note in run.notes)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ('{"machine_info": {}}', "not a pytest-benchmark JSON file"),
        ("[1, 2]", "not a pytest-benchmark JSON file"),
    ],
    ids=["missing", "garbage", "no-benchmarks", "a-list"],
)
def test_unreadable_files_raise_report_errors_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ReportError, match=message) as error:
        load_run(path)
    assert str(path) in str(error.value)
    assert isinstance(error.value, trtcheck.TrtcheckError)


def test_a_file_without_trtcheck_benchmarks_is_an_error(bench_files, derive):
    def keep_others(data):
        data["benchmarks"] = [b for b in data["benchmarks"] if "trtcheck_schema" not in b["extra_info"]]

    with pytest.raises(ReportError, match="no trtcheck benchmarks"):
        load_run(derive(bench_files["baseline"], "plain.json", keep_others))


def test_trtcheck_extra_info_without_a_model_is_an_error(bench_files, derive):
    def break_one(data):
        del data["benchmarks"][0]["extra_info"]["model"]

    with pytest.raises(ReportError, match="without 'model'"):
        load_run(derive(bench_files["baseline"], "broken.json", break_one))


def test_no_files_is_an_error():
    with pytest.raises(ReportError, match="no benchmark files"):
        load_runs([])

