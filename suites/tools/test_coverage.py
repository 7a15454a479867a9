"""``python -m trtcheck.tools.coverage``: the core ATen opset's converters, measured, and their totals."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import trtcheck
from trtcheck.tools import coverage

aten = torch.ops.aten


class _SinRelu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.sin(x)) + torch.atan2(x, x)  # atan2: core ATen, no converter


def _lowered() -> torch.fx.GraphModule:
    return trtcheck.lower(_SinRelu(), (torch.randn(2, 3),))


def _check_totals(report: coverage.Coverage) -> dict[str, int]:
    totals = report.totals
    assert totals["core overloads"] == len(report.rows) == len({r.overload for r in report.rows})
    assert totals["with converter"] == sum(trtcheck.conversion.get(r.overload) is not None for r in report.rows)
    assert totals["core overloads"] >= totals["with converter"] >= totals["measured"]
    assert totals["measured"] >= totals["TensorRT parser supports all emitted ops"]
    for row in report.rows:
        assert not row.measured or row.converter, f"{row.overload} measured without a converter"
        assert row.tensorrt_ok == (row.converter and row.measured and row.onnx_ops <= coverage.TENSORRT_ONNX_OPS)
    return totals


def test_core_overloads_are_the_core_tagged_aten_overloads() -> None:
    core = coverage.core_overloads()
    assert len(core) == len(set(core)) > 150
    assert all(torch.Tag.core in o.tags and o.namespace == "aten" for o in core)
    for expected in (aten.add.Tensor, aten.relu.default, aten.convolution.default, aten.sin.default, aten.atan2.default):
        assert expected in core
    assert aten.linear.default not in core  # decomposed by torch.export, never in a lowered graph


def test_measured_rows_name_the_onnx_ops_each_converter_emits() -> None:
    report = coverage.coverage(coverage.observe([_lowered()]), "a test graph")
    rows = {r.overload: r for r in report.rows}
    sin, relu, atan2 = rows[aten.sin.default], rows[aten.relu.default], rows[aten.atan2.default]
    assert sin.converter and sin.measured and sin.onnx_ops == {"Sin"} and sin.tensorrt_ok
    assert relu.converter and relu.measured and relu.onnx_ops == {"Relu"} and relu.tensorrt_ok
    assert not atan2.converter and not atan2.measured and not atan2.tensorrt_ok  # no converter: never covered
    assert not rows[aten.cos.default].measured  # a converter, but in no graph measured
    totals = _check_totals(report)
    assert totals["measured"] >= 2
    assert "aten.sin.default" in coverage.format_coverage(report)


def test_a_registered_converter_shows_up_and_an_unsupported_onnx_op_is_flagged() -> None:
    assert trtcheck.conversion.get(aten.atan2.default) is None
    with trtcheck.conversion.Snapshot():
        # atan2 "converted" to an ONNX op TensorRT's parser lacks: covered, measured, not TensorRT-ready
        trtcheck.conversion.register(aten.atan2.default)(lambda ctx, node: ctx.add("Bernoulli", [ctx.name(node.args[0])]))
        before = coverage.coverage(coverage.observe([]), "nothing").totals
        report = coverage.coverage(coverage.observe([_lowered()]), "a test graph")
        row = next(r for r in report.rows if r.overload == aten.atan2.default)
        assert row.converter and row.measured and row.onnx_ops == {"Bernoulli"}
        assert row.unsupported == {"Bernoulli"} and not row.tensorrt_ok
        totals = _check_totals(report)
        assert totals["with converter"] == before["with converter"]
        assert "unsupported: Bernoulli" in coverage.format_coverage(report)
    after = coverage.coverage(coverage.observe([]), "nothing").totals
    assert after["with converter"] == before["with converter"] - 1  # the Snapshot took it away again


def test_a_converter_that_fails_is_not_measured_and_says_why() -> None:
    def broken(ctx, node):
        raise RuntimeError("broken on purpose")

    with trtcheck.conversion.Snapshot():
        trtcheck.conversion.register(aten.sin.default, override=True)(broken)
        report = coverage.coverage(coverage.observe([_lowered()]), "a test graph")
    row = next(r for r in report.rows if r.overload == aten.sin.default)
    assert row.converter and not row.measured and not row.tensorrt_ok
    assert any("broken on purpose" in e for e in row.errors)
    assert report.totals["converter failures seen"] >= 1


@pytest.mark.parametrize(
    ("dtype", "emitted"),
    [(torch.float32, {"Sin"}), (torch.float16, {"Sin"}), (torch.int64, {"Cast", "Sin"})],
)
def test_sin_emits_a_cast_exactly_for_the_inputs_it_promotes(dtype, emitted) -> None:
    """sin of an int64 tensor is float32 in PyTorch: the converter casts the input first, and only then
    (bool inputs are refused: the validator takes numeric ones)."""
    pytest.importorskip("expecttest")
    observed = coverage.observe_opinfo(["sin"], dtypes=(dtype,), more_samples=0)
    assert observed[aten.sin.default].converted >= 1 and observed[aten.sin.default].onnx_ops == emitted


@pytest.mark.slow
def test_the_module_runs_on_opinfo_samples() -> None:
    pytest.importorskip("expecttest")
    result = subprocess.run(
        [sys.executable, "-m", "trtcheck.tools.coverage", "--ops", "sin,nn.functional.relu,cat"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Totals:" in out and coverage.SOURCE in out
    sin_line = next(line for line in out.splitlines() if line.startswith("aten.sin.default "))
    # the samples' dtypes together: Sin for float32/float16, Cast then Sin for int64 (see the test below)
    assert sin_line.split()[1:3] == ["yes", "yes"] and sin_line.split(None, 3)[3] == "Cast, Sin", sin_line
    cat_line = next(line for line in out.splitlines() if line.startswith("aten.cat.default "))
    assert "Concat" in cat_line
    totals = dict(line.strip().rsplit(": ", 1) for line in out.split("Totals:")[1].splitlines() if ": " in line)
    assert int(totals["core overloads"]) >= int(totals["with converter"]) >= int(totals["measured"]) >= 3


@pytest.fixture
def main_in_process(monkeypatch):
    """``coverage.main`` sets torch's thread count and log levels for its own process: not for this test session's."""
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(torch._logging, "set_logs", lambda **levels: None)
    return coverage.main


def test_without_expecttest_it_says_so_at_once_and_the_totals_do_not_claim_measured_0(main_in_process, monkeypatch, capsys) -> None:
    """A non-dev install: no OpInfo, so nothing is measured; it must not spend a minute and report "measured: 0"."""
    real_find_spec = coverage.importlib.util.find_spec
    monkeypatch.setattr(coverage.importlib.util, "find_spec", lambda name, *a: None if name == "expecttest" else real_find_spec(name, *a))
    monkeypatch.setattr(coverage, "observe_opinfo", lambda *a, **k: pytest.fail("measured without expecttest"))
    assert main_in_process(["--totals"]) == 0
    captured = capsys.readouterr()
    assert "expecttest is not installed" in captured.err
    assert "  measured: not measured (expecttest is not installed: pip install expecttest)" in captured.out
    assert "  with converter: " in captured.out and "measured: 0" not in captured.out


@pytest.mark.slow
def test_measuring_reports_progress_on_stderr(main_in_process, capsys) -> None:
    pytest.importorskip("expecttest")
    assert main_in_process(["--ops", "sin", "--totals"]) == 0
    captured = capsys.readouterr()
    assert "trtcheck coverage: OpInfo samples measured: " in captured.err and " s)" in captured.err
    assert "Totals:" in captured.out and "trtcheck coverage:" not in captured.out
