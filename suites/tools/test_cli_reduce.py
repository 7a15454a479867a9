"""``trtcheck reduce MODEL`` and ``trtcheck reduce repro_dir/``: every wrong op as a repro folder of a few nodes,
exit 1 when one is found, 0 when the outputs match; and ``trtcheck verify`` printing the localization."""

from __future__ import annotations

import pytest
import torch

from trtcheck.tools.cli import main

ORT = ["--backend", "onnxruntime"]


@pytest.mark.slow
def test_reduce_writes_a_repro_of_the_wrong_op_and_exits_1(tmp_path, wrong_relu, capsys):
    path = wrong_relu
    out_dir = tmp_path / "reduced"
    assert main(["reduce", f"{path}:build", "--min-block-size", "1", *ORT, "--out", str(out_dir)]) == 1
    out = capsys.readouterr().out
    assert "1 independent culprit(s)" in out and "1 node(s): relu = aten.relu.default" in out
    assert (out_dir / "culprit_1" / "repro.py").is_file() and (out_dir / "culprit_1" / "subgraph.pt").is_file()


def test_verify_prints_the_culprit_and_reduce_takes_its_repro_folder(tmp_path, wrong_relu, capsys):
    path = wrong_relu
    report_dir = tmp_path / "report"
    assert main(["verify", f"{path}:build", "--min-block-size", "1", *ORT, "--report-dir", str(report_dir)]) == 1
    out = capsys.readouterr().out
    assert "culprit: relu = aten.relu.default" in out and "_relu_as_negation" in out  # the converter, by its function
    (folder,) = [repro.parent for repro in report_dir.rglob("repro.py")]
    assert "culprit: relu" in (folder / "localization.txt").read_text()
    assert main(["reduce", str(folder), *ORT, "--out", str(tmp_path / "reduced")]) == 1
    assert "1 node(s): relu = aten.relu.default" in capsys.readouterr().out


def test_reduce_exits_0_when_the_outputs_match(factories, tmp_path, capsys):
    assert main(["reduce", f"{factories}:build", "--min-block-size", "1", *ORT, "--out", str(tmp_path / "r")]) == 0
    assert "nothing to reduce" in capsys.readouterr().out


def test_reduce_of_a_folder_that_is_no_repro_is_a_usage_error(tmp_path, capsys):
    assert main(["reduce", str(tmp_path), *ORT]) == 2
    assert "is not a trtcheck repro folder" in capsys.readouterr().err


def test_reduce_of_a_repro_folder_registers_the_folder_s_converters(tmp_path, wrong_relu, capsys):
    """Issue 43, item 7: ``trtcheck reduce repro_dir/`` reduced with the built-in converters, not the folder's
    ``converters.json``: "nothing to reduce", exit 0, for a folder whose own repro.py fails. It now registers them
    as repro.py does (and says so), and only for the reduction."""
    from trtcheck import conversion as converters

    report_dir = tmp_path / "report"
    with converters.Snapshot():  # the wrong relu is registered by verify's import of wrong.py, and undone after
        assert main(["verify", f"{wrong_relu}:build", "--min-block-size", "1", *ORT, "--report-dir", str(report_dir)]) == 1
    capsys.readouterr()
    (folder,) = [repro.parent for repro in report_dir.rglob("repro.py")]
    assert "_relu_as_negation" in (folder / "converters.json").read_text()
    builtin = converters.get(torch.ops.aten.relu.default)
    assert builtin.builtin  # this process has trtcheck's own relu again: only the folder's file has the wrong one
    assert main(["reduce", str(folder), *ORT, "--out", str(tmp_path / "reduced")]) == 1
    out = capsys.readouterr().out
    assert "converter: registered" in out and "_relu_as_negation" in out
    assert "1 node(s): relu = aten.relu.default" in out
    assert converters.get(torch.ops.aten.relu.default) is builtin  # the folder's converters do not outlive the reduction


WRONG_TANH_IN_A_BRANCH = '''
import torch
from torch import nn
from trtcheck import conversion as converters

_builtin = converters.get(torch.ops.aten.tanh.default)


def _tanh_off_by_one_percent(ctx, node):  # wrong on purpose: the engine computes 1.01 * tanh(x)
    out = _builtin.fn(ctx, node)
    return ctx.add("Mul", [out, ctx.constant(1.01, node.meta["val"].dtype)])


converters.register(torch.ops.aten.tanh.default, override=True, validator=_builtin.validator)(_tanh_off_by_one_percent)


class Branching(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        h = torch.cond(h.sum() > -1e6, lambda h: torch.tanh(h) * 2.0, lambda h: torch.sigmoid(h) + 1.0, (h,))
        return self.out(h)


def build():
    torch.manual_seed(0)
    return Branching().eval(), (torch.randn(2, 8),)
'''


def test_reduce_of_a_mismatch_inside_a_cond_branch_exits_1_and_names_the_branch(tmp_path, capsys):
    """Issue 43, item 6: a wrong converter inside a cond branch gave "0 independent culprit(s), 1 sub-engines" and
    exit 0, which the README says means the outputs match; they do not. reduce now reduces inside the branch the
    input took (item 4: where localization finds the culprit), names it, and exits 1."""
    from trtcheck import conversion as converters

    path = tmp_path / "branching.py"
    path.write_text(WRONG_TANH_IN_A_BRANCH)
    with converters.Snapshot():  # the wrong tanh is registered by the import of branching.py, and undone after
        code = main(["reduce", f"{path}:build", "--min-block-size", "1", *ORT, "--out", str(tmp_path / "reduced")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 independent culprit(s)" in out, out
    assert "culprit 1: 1 node(s) in branch true_graph_0 of cond (node cond): tanh = aten.tanh.default" in out, out
    assert "false_graph_0" not in out  # not taken
