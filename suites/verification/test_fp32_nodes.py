"""Issue 24, items 3 and 4: the nodes that leave fp16's range named from eager's activations
(``verification.ranges``), ``Settings.fp32_nodes`` honoured by ONNX Runtime's emulation (TensorRT's per-layer
constraint: suites/engines/test_engines_tensorrt.py, mocked), and ``trtcheck precision``'s search for a set."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import trtcheck
from trtcheck import conversion as converters
from trtcheck.errors import SettingsError
from trtcheck.tools.cli import main
from trtcheck.verification.fp32_search import search_fp32_nodes
from trtcheck.verification.ranges import range_findings
from trtcheck.verification.recording import record_eager

FP16 = trtcheck.Settings(min_block_size=1, precision="fp16")


class ExpSum(torch.nn.Module):
    """exp(12 h) passes 65504 in fp16, and so does its sum; the division brings it back into range."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return torch.exp(h * 12).sum(-1) / 1e6 + torch.tanh(h).mean()


class MaskedSoftmax(torch.nn.Module):
    def forward(self, x, mask):
        return torch.softmax(x + mask * -1e9, -1)


class BigLayerNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x * 1000)


def exp_sum():
    torch.manual_seed(0)
    return ExpSum().eval(), (torch.randn(3, 8),)


def _findings(model, inputs, precision="fp16"):
    gm = trtcheck.lower(model, inputs)
    return range_findings(gm, record_eager(gm, [t.clone() for t in inputs]), precision)


@pytest.mark.slow
def test_overflows_are_named_with_their_pattern_origins_first():
    exp = _findings(*exp_sum())
    assert [(f.node, f.kind, f.origin) for f in exp[:2]] == [("exp", "overflow", True), ("sum_1", "overflow", False)]
    assert "exp of large values" in str(exp[0])
    mask = _findings(MaskedSoftmax(), (torch.randn(2, 8), torch.tensor([[0.0, 1.0] * 4] * 2)))
    assert mask[0].node == "mul" and mask[0].origin and "a constant -1e+09 past the range (a mask value?" in mask[0].pattern
    assert any(f.node == "_softmax" and "softmax with a large negative mask" in f.pattern for f in mask)
    norm = _findings(BigLayerNorm(), (torch.randn(2, 16),))
    assert [f.node for f in norm] == ["native_layer_norm"] and "LayerNorm variance" in norm[0].pattern  # inside the op
    assert _findings(*exp_sum(), precision="bf16") == []  # bf16 has float32's range


def test_a_failing_fp16_report_names_the_overflowing_nodes_and_the_setting_that_keeps_them():
    model, inputs = exp_sum()
    with pytest.raises(trtcheck.VerificationError) as info:
        trtcheck.verify(model, inputs, FP16, backend="onnxruntime", localize_budget=0)
    text = str(info.value)
    assert "inf or NaN where float64 is finite" in text and "fp16 range (eager's float32 activations" in text
    assert "exp (aten.exp.default)" in text
    report = info.value.report  # issue 53, item 4: the fix printed is checked before it is printed, and holds
    assert report.range_fix[0] == "exp" and report.range_fix_holds is True
    assert f"fp32_nodes={report.range_fix!r}) (checked: verify passes with it)" in text
    trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=report.range_fix), backend="onnxruntime")


def test_the_fix_for_an_overflowing_sum_of_squares_keeps_its_reader_too():
    """Issue 53, item 4: the report printed ``fp32_nodes=['sum_1']`` for an overflowing sum of squares, and applying it
    failed again with inf (``sum_1``'s float32 result cast back to fp16 for ``sqrt``)."""

    class Norm(torch.nn.Module):
        def forward(self, x):
            return x / torch.sqrt((x * x).sum(-1, keepdim=True))

    inputs = (torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 40,)  # squares in range, their sum not
    with pytest.raises(trtcheck.VerificationError) as info:
        trtcheck.verify(Norm(), inputs, FP16, backend="onnxruntime", localize_budget=0)
    report = info.value.report
    assert [f.node for f in report.range_findings if f.origin] == ["sum_1"]
    assert report.range_fix == ["sum_1", "sqrt"] and report.range_fix_holds is True, str(report)
    with pytest.raises(trtcheck.VerificationError):  # the origin alone, as it was printed before
        trtcheck.verify(Norm(), inputs, dataclasses.replace(FP16, fp32_nodes=["sum_1"]), backend="onnxruntime", localize_budget=0)


def test_a_reduced_precision_localization_builds_at_fp16_and_names_the_range_not_a_converter():
    """Issue 43: localization's sub-engines are built in fp16 and judged by the reduced-precision judge, so the op
    that leaves fp16's range is found and called fp16's range (eager in fp16 as wrong), with the ``fp32_nodes`` fix,
    never a wrong converter or a fusion."""
    model, inputs = exp_sum()
    with pytest.raises(trtcheck.VerificationError) as info:
        trtcheck.verify(model, inputs, FP16, backend="onnxruntime")
    culprit = info.value.report.localization.culprit
    assert culprit is not None and culprit.node == "exp" and culprit.precision == "fp16" and culprit.ill_conditioned
    text = str(info.value)
    assert "the engines run in fp16 (with the compiled fp32_nodes, use_fp32_acc and autocast), and so were" in text
    assert "builds its sub-engines in float32" not in text and "this op's converter is wrong" not in text
    assert "not the converter; keep 'exp' in float32, with what its value reaches" in text
    # the one setting printed is the checked one: ['exp'] alone does not verify (the sum overflows next)
    assert "fp32_nodes=['exp'])" not in text and "(checked: verify passes with it)" in text
    assert "(a fusion)" not in text


@pytest.mark.parametrize("keep", [["exp", "sum_1", "div"], ["aten::exp", "aten.sum.dim_IntList", "aten::div"]])
def test_nodes_kept_in_float32_by_name_or_op_make_it_verify(keep):
    model, inputs = exp_sum()
    report = trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=keep), backend="onnxruntime", localize_budget=0)
    assert report.passed


@pytest.mark.slow
def test_keeping_too_few_still_fails():
    """The kept set is really honoured per node: exp alone in float32 still overflows in the sum."""
    model, inputs = exp_sum()
    with pytest.raises(trtcheck.VerificationError):
        trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=["exp"]), backend="onnxruntime", localize_budget=0)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"fp32_nodes": ["exp"]}, r"fp32_nodes=\['exp'\] keeps nodes in float32 under a reduced precision, but precision is 'fp32'"),
        ({"precision": "fp16", "fp32_nodes": ["aten::expp"]}, r"fp32_nodes: unknown op 'aten::expp'.*Did you mean.*aten::exp"),
        ({"precision": "fp16", "fp32_nodes": "exp"}, r"fp32_nodes must be a list of node or op names, got the single string"),
        ({"precision": "fp16", "fp32_nodes": [3]}, r"fp32_nodes entries must be node names"),
    ],
)
def test_bad_fp32_nodes_are_settings_errors(values, match):
    with pytest.raises(SettingsError, match=match):
        trtcheck.compile(*exp_sum(), trtcheck.Settings(min_block_size=1, **values), backend="onnxruntime")


def test_a_node_name_the_graph_does_not_have_is_named_with_the_graphs_nodes():
    with pytest.raises(SettingsError, match=r"fp32_nodes: 'layer_norm' matches no node of the lowered graph.*exp"):
        trtcheck.compile(*exp_sum(), dataclasses.replace(FP16, fp32_nodes=["layer_norm"]), backend="onnxruntime")


@pytest.mark.parametrize("autocast, field", [
    (trtcheck.Autocast(excluded_ops=("aten::square",)), r"Autocast.excluded_ops: 'aten.square'"),
    (trtcheck.Autocast(excluded_nodes=("layer_norm.*",)), r"Autocast.excluded_nodes: 'layer_norm.\*'"),
    (trtcheck.Autocast(calibration={"softmax": 3.0}), r"Autocast.calibration: 'softmax'"),
], ids=["excluded_ops", "excluded_nodes", "calibration"])
def test_autocast_entries_matching_no_node_are_refused_as_fp32_nodes_are(autocast, field):
    """The same mistake in ``fp32_nodes`` is refused; in ``Autocast`` it was silently ignored. The error names the
    field the user wrote."""
    with pytest.raises(SettingsError, match=field + r" matches no node of the lowered graph.*exp"):
        trtcheck.partition(*exp_sum(), dataclasses.replace(FP16, autocast=autocast))


@pytest.mark.slow
def test_the_search_finds_a_set_from_which_no_node_can_be_dropped():
    model, inputs = exp_sum()
    found = search_fp32_nodes(model, inputs, "fp16", trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                              timed=False, confirm_seeds=0)
    assert found.fp32_nodes and found.complete
    settings = dataclasses.replace(FP16, fp32_nodes=found.fp32_nodes)
    assert trtcheck.verify(model, inputs, settings, backend="onnxruntime", localize_budget=0).passed
    for node in found.fp32_nodes:  # 1-minimal: without any one of them it fails again
        fewer = dataclasses.replace(FP16, fp32_nodes=[n for n in found.fp32_nodes if n != node])
        with pytest.raises(trtcheck.VerificationError):
            trtcheck.verify(model, inputs, fewer, backend="onnxruntime", localize_budget=0)
    assert f"fp32_nodes={found.fp32_nodes!r}" in str(found)


def test_the_search_needs_nothing_for_a_model_in_range_and_finds_nothing_for_a_wrong_converter():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = (torch.randn(2, 8),)
    assert search_fp32_nodes(mlp, x, "fp16", trtcheck.Settings(min_block_size=1), backend="onnxruntime", confirm_seeds=0).fp32_nodes == []

    def relu_as_negation(ctx, node):  # wrong on purpose: no precision makes -x equal relu(x)
        return ctx.add("Neg", [ctx.name(node.args[0])])

    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(relu_as_negation)
        found = search_fp32_nodes(mlp, x, "fp16", trtcheck.Settings(min_block_size=1), backend="onnxruntime", confirm_seeds=0)
    assert found.fp32_nodes is None and "the mismatch is not one of precision" in str(found)


@pytest.mark.slow
def test_the_command_prints_the_setting_and_refuses_fp32(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text(
        "import torch\nfrom suites.verification.test_fp32_nodes import exp_sum as build\n"
    )
    assert main(["precision", f"{path}:build", "--precision", "fp16", "--min-block-size", "1", "--backend", "onnxruntime",
                 "--budget", "120"]) == 0
    out = capsys.readouterr().out
    assert "verifies in fp16 with" in out and "Settings(precision='fp16', fp32_nodes=[" in out and "time per call" in out
    assert main(["precision", f"{path}:build", "--precision", "fp32"]) == 2
    assert "needs --precision fp16 or --precision bf16" in capsys.readouterr().err


class OverflowingBranch(torch.nn.Module):
    """A ``torch.cond`` whose taken branch leaves fp16's range (issue 53, items 6 and 7)."""

    def forward(self, x):
        def big(x):
            y = x * 300.0
            return torch.sqrt((y * y).sum(-1, keepdim=True))

        def small(x):
            return torch.sqrt((x * x).sum(-1, keepdim=True)) + 1

        return torch.cond(x.sum() > 0, big, small, (x,))


def _positive() -> tuple[torch.Tensor]:
    return (torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).abs(),)


def test_fp32_nodes_takes_a_branch_node_by_the_name_explain_prints_and_a_bare_name_only_at_the_top():
    model, inputs = OverflowingBranch(), _positive()
    explained = trtcheck.partition(model, inputs, FP16).explain()
    assert "true_graph_0/sum_1 (aten::sum.dim_IntList)" in explained
    keep = ["true_graph_0/mul_1", "true_graph_0/sum_1", "true_graph_0/sqrt"]
    with pytest.raises(trtcheck.VerificationError):
        trtcheck.verify(model, inputs, FP16, backend="onnxruntime")
    trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=keep), backend="onnxruntime")
    with pytest.raises(SettingsError, match=r"'sqrt' matches no node.*true_graph_0/sqrt"):
        trtcheck.partition(model, inputs, dataclasses.replace(FP16, fp32_nodes=["sqrt"]))  # the top graph has no sqrt


def test_the_search_searches_a_branchs_nodes_and_its_set_verifies():
    model, inputs = OverflowingBranch(), _positive()
    found = search_fp32_nodes(model, inputs, "fp16", trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                              timed=False, confirm_seeds=0)
    assert found.fp32_nodes and all(name.startswith("true_graph_0/") for name in found.fp32_nodes), str(found)
    trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=found.fp32_nodes), backend="onnxruntime")


def test_the_search_of_a_saved_program_tries_the_sizes_verify_tries(tmp_path):
    """Issue 53, item 5: a ``.pt2`` whose Dim's maximum overflows fp16 (not its example) must not be found to verify
    with no node in float32: the search's trials are ``verify``'s, at the Dims' sizes too."""

    class Norm(torch.nn.Module):
        def forward(self, x):
            return torch.sqrt((x * x).sum(0))

    x = torch.rand(8, 4, generator=torch.Generator().manual_seed(0)) * 100 + 50  # 8 rows stay in range, 4096 do not
    program = torch.export.export(Norm(), (x,), dynamic_shapes=({0: torch.export.Dim("n", min=2, max=4096)},))
    path = tmp_path / "norm.pt2"
    torch.export.save(program, path)
    with pytest.raises(trtcheck.VerificationError) as caught:
        trtcheck.verify(str(path), None, FP16, backend="onnxruntime")
    assert any(label.startswith("max:") for label in caught.value.report.input_sets)
    found = search_fp32_nodes(str(path), None, "fp16", trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                              timed=False, confirm_seeds=0)
    assert found.fp32_nodes, str(found)
    trtcheck.verify(str(path), None, dataclasses.replace(FP16, fp32_nodes=found.fp32_nodes), backend="onnxruntime")


class DividesByAConstantPastTheRange(torch.nn.Module):
    """``x / 1e5`` (or a lifted tensor constant of 1e5): the fp16 graph clamps the constant to 65504 (issue 53, item 3)."""

    def __init__(self, as_tensor: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.as_tensor = torch.nn.Linear(16, 4), as_tensor

    def forward(self, x):
        return self.fc(x / torch.tensor(1e5) if self.as_tensor else x / 1e5)


@pytest.mark.parametrize("as_tensor", [False, True], ids=["scalar", "tensor-constant"])
def test_a_constant_clamped_to_the_range_is_a_range_finding_naming_the_node_never_a_converter(as_tensor):
    model = DividesByAConstantPastTheRange(as_tensor).eval()
    inputs = (torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) * 1e4,)
    with pytest.raises(trtcheck.VerificationError) as caught:
        trtcheck.verify(model, inputs, FP16, backend="onnxruntime")
    report = caught.value.report
    (finding,) = [f for f in report.range_findings if f.clamped]
    assert finding.origin and "a constant 100000 past the range" in finding.pattern, report.range_findings
    text = str(report)
    assert "a conversion error" not in text and "this op's converter is wrong" not in text, text
    assert f"Settings.fp32_nodes={finding.fp32_nodes!r}" in text  # the tensor: its clone too
    assert report.localization.culprit.node == finding.node and report.localization.culprit.ill_conditioned
    trtcheck.verify(model, inputs, dataclasses.replace(FP16, fp32_nodes=finding.fp32_nodes), backend="onnxruntime")  # it holds


class NormOfScaled(torch.nn.Module):
    """A sum of squares that overflows float16 (65504) on some random input sets and not on others: 120² times a
    sum of four squared normals, 2.7 at most in seed 1's sets and 8.4 in seed 4's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x * 120).pow(2).sum(-1, keepdim=True)) / 100


@pytest.mark.slow
def test_the_search_holds_on_the_input_sets_of_more_seeds_than_the_one_it_was_given():
    model, inputs, one = NormOfScaled(), (torch.zeros(1, 4),), trtcheck.Settings(min_block_size=1)
    alone = search_fp32_nodes(model, inputs, "fp16", one, backend="onnxruntime", seed=1, timed=False, confirm_seeds=0)
    assert alone.fp32_nodes == []  # seed 1's sets alone: nothing overflows, so nothing to keep
    with pytest.raises(trtcheck.VerificationError):
        trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=1, precision="fp16"), backend="onnxruntime", seed=4)
    found = search_fp32_nodes(model, inputs, "fp16", one, backend="onnxruntime", seed=1, timed=False)
    assert found.fp32_nodes and found.seeds == [1, 2, 3, 4], str(found)
    assert "on the input sets of seeds 1, 2, 3, 4" in str(found)
    kept = trtcheck.Settings(min_block_size=1, precision="fp16", fp32_nodes=found.fp32_nodes)
    for seed in range(1, 5):
        trtcheck.verify(model, inputs, kept, backend="onnxruntime", seed=seed)
