"""Issue 54: a model torch.export refuses, verified as ``torch.compile(backend="tensorrt")`` deploys it.

``Gated`` branches on a tensor's value (export refuses it; dynamo breaks the graph there): ``frontend="auto"`` says
export refused it and verifies each captured graph, on the inputs it was called with, and the model whole. A planted
wrong converter in the graph after the break is named with its source line, and its repro folder fails alone.
"""

from __future__ import annotations

import pytest
import torch

import trtcheck
import trtcheck.dynamo
import trtcheck.errors
from suites.verification.planted import off_by, planted, run_repro
from trtcheck.errors import ExportRefusedError, VerificationError
from trtcheck.verification.graph_breaks import GraphBreakReport


class Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        if y.mean() > 0.1:  # data-dependent: export refuses, dynamo breaks the graph here
            y = y * 2.0
        return torch.sigmoid(self.head(y) * 3.0)  # the graph after the break


def _model() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Gated().eval(), (torch.rand(2, 8),)


def test_auto_verifies_a_model_export_refuses_through_its_captured_graphs():
    model, args = _model()
    report = trtcheck.verify(model, args, backend="onnxruntime", settings=trtcheck.Settings(min_block_size=1))
    assert isinstance(report, GraphBreakReport) and report.passed
    text = str(report)
    assert "torch.export could not trace Gated" in text and "frontend='auto'" in text, text
    assert report.capture.breaks, text
    assert all(brk.line.startswith("dynamo/test_graph_breaks.py:") for brk in report.capture.breaks), text
    verified = [verdict for verdict in report.graphs if verdict.report is not None]
    assert len(verified) >= 2 and all(verdict.report.passed for verdict in verified), text
    assert all(len(verdict.graph.calls) == 4 for verdict in verified), text  # example, example again, two random sets
    assert len(report.comparisons) == 4 and all(comparison.passed for comparison in report.comparisons)


def test_export_frontend_still_refuses_it():
    model, args = _model()
    with pytest.raises(ExportRefusedError, match="torch.export could not trace Gated"):
        trtcheck.verify(model, args, backend="onnxruntime", frontend="export")


def test_a_bad_frontend_is_refused_before_anything_runs():
    model, args = _model()
    with pytest.raises(trtcheck.SettingsError, match="frontend='graph'"):
        trtcheck.verify(model, args, frontend="graph")


def test_a_wrong_converter_after_the_break_is_localized_to_its_line_and_its_repro_fails_alone(tmp_path):
    model, args = _model()
    with planted(torch.ops.aten.sigmoid.default, None, off_by(1.05)):
        with pytest.raises(VerificationError) as failure:
            trtcheck.verify(model, args, backend="onnxruntime", settings=trtcheck.Settings(min_block_size=1),
                            report_dir=tmp_path, frontend="compile")
        report = failure.value.report
        assert isinstance(report, GraphBreakReport)
        failed = [verdict for verdict in report.graphs if verdict.report is not None and not verdict.report.passed]
        assert len(failed) == 1, str(report)
        localization = failed[0].report.localization
        assert localization is not None and localization.culprit is not None, str(report)
        text = str(report)
        assert "sigmoid" in str(localization.culprit) and "test_graph_breaks.py" in text, text
        assert failed[0].report.repro is not None
        assert run_repro(failed[0].report.repro) != 0  # the repro fails alone, the planted converter still registered
    assert not all(comparison.passed for comparison in report.comparisons), text
    assert any("on the deployed run's own inputs, 1 graph differs from eager: graph 1 (" in note for note in report.notes), text


def test_compile_and_partition_take_the_frontend_too():
    model, args = _model()
    with pytest.warns(trtcheck.dynamo.GraphBreakWarning, match="torch.export could not trace Gated"):
        compiled = trtcheck.compile(model, args, trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert isinstance(compiled, trtcheck.dynamo.DynamoModule) and not compiled.failed
    assert len(compiled.graphs) == 2 and all(isinstance(graph.module, trtcheck.CompiledModule) for graph in compiled.graphs)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), model(*args))
    with pytest.warns(trtcheck.dynamo.GraphBreakWarning):
        partitions = trtcheck.partition(model, args, trtcheck.Settings(min_block_size=1))
    assert [graph.index for graph, _ in partitions] == [0, 1]
    assert all(isinstance(partition, trtcheck.Partition) and partition.segments for _, partition in partitions)
    assert partitions[0][0].ended_by is not None and partitions[1][0].ended_by is None


def test_a_model_export_takes_is_compiled_as_before(recwarn):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    compiled = trtcheck.compile(model, (torch.rand(2, 4),), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert isinstance(compiled, trtcheck.CompiledModule)
    assert isinstance(trtcheck.partition(model, (torch.rand(2, 4),)), trtcheck.Partition)
    assert not [warning for warning in recwarn if issubclass(warning.category, trtcheck.dynamo.GraphBreakWarning)]
    with pytest.raises(trtcheck.SettingsError, match="frontend='compile'"):
        trtcheck.compile(torch.export.export(model, (torch.rand(2, 4),)), frontend="compile")


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_new_input_size_recompiles_or_reuses_and_both_paths_are_verified(dynamic):
    """``dynamic=False`` (Torch-TensorRT's advice): a new batch size recompiles every graph; ``dynamic=True``: dynamo
    keeps one symbolic graph, which trtcheck compiles once per size it is called at. Either way each size is verified."""
    model, args = _model()
    other = [(torch.rand(3, 8),), (torch.rand(5, 8),)]
    report = trtcheck.verify(model, args, backend="onnxruntime", settings=trtcheck.Settings(min_block_size=1),
                             frontend="compile", dynamic=dynamic, inputs=other)
    assert report.passed, str(report)
    sizes = {tuple(call[1][-1].shape) for graph in report.capture.graphs for call in graph.calls}
    assert {(2, 8), (3, 8), (5, 8)} <= sizes, str(report)
    if dynamic:
        assert report.capture.recompiles <= 1, str(report)  # the first call is static, the next one symbolic (dynamic=True: none)
        assert any("at sizes" in verdict.report.name for verdict in report.graphs if verdict.report is not None), str(report)
    else:
        assert report.capture.recompiles >= 2, str(report)  # each graph again at a new size
        assert any("size mismatch at index 0. expected 2, actual 3" in failure for failure in report.capture.guard_failures), str(report)
        assert "recompiled: forward (dynamo/test_graph_breaks.py:" in str(report), str(report)
    assert len(report.comparisons) == 4 and all(comparison.passed for comparison in report.comparisons)


def test_a_frame_at_dynamos_recompile_limit_is_reported():
    """Past ``recompile_limit`` dynamo runs a frame in eager, silently: deployed, that part is not accelerated."""
    model, args = _model()
    sizes = [(torch.rand(batch, 8),) for batch in range(3, 3 + torch._dynamo.config.recompile_limit)]
    captured, _ = trtcheck.dynamo.capture(model, [args, *sizes])
    assert captured.at_recompile_limit(), "\n".join(captured.lines())
    assert "recompile_limit" in "\n".join(captured.lines())
    few, _ = trtcheck.dynamo.capture(model, [args, (torch.rand(3, 8),)])
    assert not few.at_recompile_limit()


def test_torch_executed_ops_are_asked_of_the_model_not_of_each_graph():
    """``aten::sigmoid`` is in the graph after the break only: that graph runs it in PyTorch, the graph before is
    compiled as it is; an op no graph calls is the model's ``UnmatchedOpError`` (the matrix skips such a preset)."""
    model, args = _model()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sigmoid"])
    report = trtcheck.verify(model, args, settings, backend="onnxruntime", frontend="compile")
    forced = [verdict.report.partition for verdict in report.graphs if verdict.report is not None]
    assert [any("sigmoid" in str(node.target) for segment in partition.segments_of(trtcheck.Target.TORCH)
                for node in segment.nodes) for partition in forced] == [False, True], str(report)
    with pytest.raises(trtcheck.errors.UnmatchedOpError, match="'aten::tanh' matches no node of any graph"):
        trtcheck.verify(model, args, trtcheck.Settings(torch_executed_ops=["aten::tanh"]), backend="onnxruntime", frontend="compile")


def test_a_captured_graphs_repro_folder_reduces_to_the_wrong_op(tmp_path):
    """``trtcheck reduce`` works inside a captured graph: its repro folder is a graph of its own, and reduces to the
    planted op (the planted converter still registered, as the folder's own converters would be)."""
    from trtcheck.verification.reduce import load_repro, reduce_model

    model, args = _model()
    with planted(torch.ops.aten.sigmoid.default, None, off_by(1.05)):
        with pytest.raises(VerificationError) as failure:
            trtcheck.verify(model, args, backend="onnxruntime", settings=trtcheck.Settings(min_block_size=1),
                            report_dir=tmp_path / "report", frontend="compile", localize_budget=0)
        (failed,) = [v for v in failure.value.report.graphs if v.report is not None and not v.report.passed]
        case = load_repro(failed.report.repro)
        reduction = reduce_model(case.model, case.example_inputs, case.settings, backend="onnxruntime",
                                 inputs=case.input_sets, out_dir=tmp_path / "reduced")
    assert reduction.failed and "sigmoid" in str(reduction), str(reduction)


def test_exports_refusal_prints_nothing_and_keeps_its_partial_graph_for_verbose(capfd):
    """torch.export prints a refused model's partial graph to stderr (30 lines for this model, twice under ``auto``):
    it goes on the error's ``torch_log`` (``trtcheck ... --verbose``), the refusal saying what failed and where."""
    model, args = _model()
    with pytest.raises(ExportRefusedError) as refusal:
        trtcheck.lower(model, args)
    assert "def forward" not in capfd.readouterr().err
    assert "def forward" in refusal.value.torch_log
