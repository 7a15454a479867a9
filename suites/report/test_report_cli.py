"""``trtcheck report``: exit codes and messages, through ``trtcheck.tools.cli.main``."""

from __future__ import annotations

from datetime import datetime, timedelta

from trtcheck.tools.cli import main


def test_report_writes_both_documents(bench_files, tmp_path, capsys):
    assert main(["report", str(bench_files["baseline"]), str(bench_files["changed"]), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" in out
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.html").is_file()


def test_fail_on_regression_exits_1_when_a_regression_is_flagged(bench_files, tmp_path):
    argv = ["report", str(bench_files["changed"]), "--baseline", str(bench_files["baseline"]), "--out", str(tmp_path)]
    assert main([*argv, "--fail-on-regression"]) == 1


def test_fail_on_regression_exits_0_without_regressions(bench_files, derive, tmp_path):
    def later(data):  # the same timings an hour later: nothing regressed
        data["datetime"] = (datetime.fromisoformat(data["datetime"]) + timedelta(hours=1)).isoformat()

    again = derive(bench_files["baseline"], "again.json", later)
    argv = ["report", str(bench_files["baseline"]), str(again), "--out", str(tmp_path / "out"), "--fail-on-regression"]
    assert main(argv) == 0


def test_cross_machine_runs_warn_and_do_not_fail(bench_files, tmp_path, capsys):
    argv = [
        "report", str(bench_files["baseline"]), str(bench_files["other_machine"]),
        "--out", str(tmp_path), "--fail-on-regression", "--threshold", "0",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "trtcheck: warning: runs come from 2 different machines" in captured.err
    assert "REGRESSION" not in captured.out


def test_unreadable_input_exits_2_with_a_message(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trtcheck: error:") and "bad.json: not JSON" in err
    assert not (tmp_path / "out").exists()


def test_a_missing_file_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.json"), "--out", str(tmp_path)]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err


def test_no_trtcheck_benchmarks_exits_2(bench_files, derive, tmp_path, capsys):
    def keep_others(data):
        data["benchmarks"] = [b for b in data["benchmarks"] if "trtcheck_schema" not in b["extra_info"]]

    plain = derive(bench_files["baseline"], "plain.json", keep_others)
    assert main(["report", str(plain), "--out", str(tmp_path / "out")]) == 2
    assert "no trtcheck benchmarks" in capsys.readouterr().err


def test_a_negative_threshold_exits_2(bench_files, tmp_path, capsys):
    assert main(["report", str(bench_files["baseline"]), str(bench_files["changed"]), "--out", str(tmp_path), "--threshold", "-1"]) == 2
    assert "threshold must be >= 0" in capsys.readouterr().err
