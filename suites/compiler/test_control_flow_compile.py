"""Compiling control flow: engines inside the branches of ``torch.cond`` and ``while_loop``, matching eager.

Every branch is stitched on its own and replaces the original branch in the stitched parent, whose copied
cond node then runs it (torch.cond's eager kernel calls its branches as plain callables). The tests count
which branch ran, so "matches eager" covers both; a branch segment that fails to compile falls back to
PyTorch, reported in its sub-partition and in the parent.
"""

from __future__ import annotations

import importlib
import re

import pytest
import torch

import trtcheck
import trtcheck_zoo as models
from suites.partitioning.test_control_flow import NestedCond
from trtcheck import Target
from trtcheck.compiler import convert as compiler
from trtcheck.compiler.convert import OnnxModels, convert
from trtcheck.lowering.export import LoweringCache
from trtcheck.runtime.stitch import EngineModule, WithoutAutograd
from trtcheck.verification.determinism import branch_determinism_violations
from trtcheck.verification.repro import write_repro
from trtcheck.verification.verify import stitched_graph_violations
from trtcheck_zoo.control_flow_models import CondBranches

BRANCHES = ("true_graph_0", "false_graph_0")


def _engines(module: torch.nn.Module) -> list[EngineModule]:
    return [child for child in module.modules() if isinstance(child, EngineModule)]


def _count_calls(modules: dict[str, torch.nn.Module]) -> dict[str, int]:
    """Calls of each module from now on (forward hooks; torch.cond calls a branch through Module.__call__)."""
    counts = dict.fromkeys(modules, 0)
    for name, module in modules.items():
        module.register_forward_hook(lambda *_, name=name: counts.__setitem__(name, counts[name] + 1))
    return counts


def _both_signs(model: CondBranches) -> list[torch.Tensor]:
    """Inputs for which the cond's predicate (the stem output's sum > 0) is True, then False."""
    generator = torch.Generator().manual_seed(0)
    candidates = [torch.randn(4, 8, generator=generator) for _ in range(20)]
    with torch.no_grad():
        signs = [bool(torch.tanh(model.stem(x)).sum() > 0) for x in candidates]
    return [candidates[signs.index(True)], candidates[signs.index(False)]]


@pytest.fixture
def cond_model():
    """A fresh build: a test's forward hooks on it must not reach export in another test (a hook breaks the
    graph torch.export captures inside a cond)."""
    return models.get("cond_branches").build()


@pytest.fixture
def compiled_cond(cond_model):
    model, inputs = cond_model
    return trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=5))


def test_each_branch_is_stitched_with_its_engine(compiled_cond):
    stitched = compiled_cond.graph_module
    for name in BRANCHES:
        branch = getattr(stitched, name)
        assert isinstance(branch, torch.fx.GraphModule) and branch.partition is compiled_cond.partition.branches[name]
        assert len(_engines(branch)) == 1, name
    assert len(_engines(stitched)) == 3  # the stem's, and one per branch
    # the lowered graph the partition describes keeps its original branches
    assert not _engines(compiled_cond.partition.graph_module.true_graph_0)
    assert compiled_cond.partition.fallbacks == []


@pytest.mark.slow
def test_both_branches_run_their_engines_and_match_eager(cond_model, compiled_cond):
    model, _ = cond_model
    stitched = compiled_cond.graph_module
    branch_calls = _count_calls({name: getattr(stitched, name) for name in BRANCHES})
    engine_calls = _count_calls({name: _engines(getattr(stitched, name))[0] for name in BRANCHES})
    for x in _both_signs(model):
        with torch.no_grad():
            torch.testing.assert_close(compiled_cond(x), model(x))
    assert branch_calls == {"true_graph_0": 1, "false_graph_0": 1}
    assert engine_calls == {"true_graph_0": 1, "false_graph_0": 1}


@pytest.mark.slow
def test_a_call_with_grad_enabled_runs_the_branches_without_autograd(cond_model, compiled_cond):
    model, _ = cond_model
    (node,) = [n for n in compiled_cond.graph_module.graph.nodes if isinstance(n.target, WithoutAutograd)]
    assert node.target.op is torch.ops.higher_order.cond
    for x in _both_signs(model):  # parameters require grad: the cond's autograd kernel would trace the engines
        torch.testing.assert_close(compiled_cond(x), model(x).detach())


def test_a_cond_whose_branches_run_no_engine_keeps_autograd(cond_model):
    model, inputs = cond_model
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_modules=["gate"]))
    assert not any(_engines(getattr(compiled.graph_module, name)) for name in BRANCHES)
    targets = [n.target for n in compiled.graph_module.graph.nodes if n.op == "call_function"]
    assert torch.ops.higher_order.cond in targets and not any(isinstance(t, WithoutAutograd) for t in targets)


@pytest.mark.slow
def test_verify_takes_both_branches(cond_model, monkeypatch):
    """verify's input sets (the example twice, then random ones) must run both stitched branches of the zoo model."""
    model, inputs = cond_model
    calls: list[dict[str, int]] = []

    verify_module = importlib.import_module("trtcheck.verification.verify")
    compile_request = verify_module.compile_request  # what verify compiles with: its request, passed through

    def compile_and_count(*args, **kwargs):
        compiled = compile_request(*args, **kwargs)
        calls.append(_count_calls({name: getattr(compiled.graph_module, name) for name in BRANCHES}))
        return compiled

    monkeypatch.setattr(verify_module, "compile_request", compile_and_count)
    report = trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=5))
    assert report.passed and len(report.comparisons) == 4
    # The example takes one branch (four calls: twice under no_grad, once with autograd on, once under
    # inference_mode: verify calls the module in every mode users call it in), the random sets the other.
    assert calls == [{"true_graph_0": 4, "false_graph_0": 2}]


@pytest.mark.slow
def test_a_forced_op_inside_a_branch_splits_its_engines(cond_model):
    model, inputs = cond_model
    report = trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"]))
    stitched_true = report.partition.branches["true_graph_0"]
    assert [s.target for s in stitched_true.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]


@pytest.mark.slow
def test_a_branch_segment_that_fails_to_convert_falls_back_and_is_reported(cond_model, monkeypatch):
    model, inputs = cond_model

    convert_segments = compiler.convert_segments

    def refuse_in_branches(partition, clock):  # the parent (the one partition with branches) converts
        if partition.branches:
            return convert_segments(partition, clock)
        tensorrt = [i for i, segment in enumerate(partition.segments) if segment.target is Target.TENSORRT]
        return OnnxModels(), {i: RuntimeError("no ONNX for this branch segment") for i in tensorrt}

    monkeypatch.setattr(compiler, "convert_segments", refuse_in_branches)
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=5))
    true = compiled.partition.branches["true_graph_0"]
    assert [s.target for s in true.segments] == [Target.TORCH]
    (reason,) = true.fallbacks
    # the reason, then where the segment's first node came from: the user's torch.cond call (torch.export keeps no
    # line inside a branch function, and none in torch.fx's generated code)
    assert re.fullmatch(
        r"segment @0 \(6 nodes\) runs in PyTorch: RuntimeError: no ONNX for this branch segment "
        r"\[conversion failed: a trtcheck converter bug or gap\] \[from \S*control_flow_models\.py:\d+\]",
        reason,
    ), reason
    assert f"branch true_graph_0: {true.fallbacks[0]}" in compiled.partition.fallbacks
    assert len(compiled.partition.fallbacks) == 2 and len(_engines(compiled.graph_module)) == 1  # the stem's only
    for x in _both_signs(model):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    with pytest.raises(trtcheck.VerificationError, match=r"\[fallback\] branch true_graph_0: segment @0"):
        trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=5))
    with pytest.raises(trtcheck.CompilationError, match=r"segment @0 of branch true_graph_0 \(6 nodes, first permute\)"):
        trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=5), strict=True)


def test_a_branch_engine_that_fails_to_build_falls_back_with_its_stage(cond_model, monkeypatch):
    model, inputs = cond_model

    def broken(*args, **kwargs):
        raise RuntimeError("no engine")

    monkeypatch.setattr("trtcheck.compiler.engine_build.build_engine", broken)
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=5))
    assert all("[engine build failed" in line for line in compiled.partition.branches["false_graph_0"].fallbacks)
    assert any(line.startswith("branch false_graph_0: segment @0") for line in compiled.partition.fallbacks)


def test_the_while_loop_body_runs_its_engine_every_iteration():
    model, inputs = models.get("while_loop_body").build()
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1))
    body = compiled.graph_module.while_loop_body_graph_0
    condition = compiled.graph_module.while_loop_cond_graph_0
    assert len(_engines(body)) == 1 and len(_engines(condition)) == 1  # i < 3 alone is an engine at min_block_size 1
    calls = _count_calls({"body": _engines(body)[0], "condition": _engines(condition)[0]})
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs))
    assert calls == {"body": model.steps, "condition": model.steps + 1}


@pytest.mark.slow
def test_the_while_loop_verifies_with_the_body_in_an_engine():
    model, inputs = models.get("while_loop_body").build()
    report = trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=5))
    body = report.partition.branches["while_loop_body_graph_0"]
    assert [s.target for s in body.segments] == [Target.TENSORRT] and len(body.segments[0].nodes) == 6


@pytest.mark.slow
def test_nested_conds_compile_and_match_eager_on_every_path():
    model = NestedCond().eval()
    torch.manual_seed(0)
    example = (torch.randn(2, 8),)
    compiled = trtcheck.compile(model, example, trtcheck.Settings(min_block_size=1))
    outer = compiled.graph_module.true_graph_0
    inner = {name: getattr(outer, name) for name in BRANCHES}
    assert all(_engines(module) for module in inner.values())
    calls = _count_calls({"outer_false": compiled.graph_module.false_graph_0, **inner})
    generator = torch.Generator().manual_seed(1)
    for _ in range(30):
        x = torch.randn(2, 8, generator=generator)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    assert min(calls.values()) >= 1, calls  # every path through the nested conds was taken
    trtcheck.verify(model, example, trtcheck.Settings(min_block_size=1))


@pytest.mark.slow
def test_compile_leaves_the_shared_lowering_as_it_was(cond_model):
    model, inputs = cond_model
    lowered = LoweringCache().get("cond_branches", lambda: models.get("cond_branches").build())
    true_branch, code = lowered.true_graph_0, lowered.true_graph_0.code
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), lowered=lowered)
    assert _engines(compiled.graph_module.true_graph_0)
    assert lowered.true_graph_0 is true_branch and true_branch.code == code and not _engines(lowered)


@pytest.mark.slow
def test_stitched_branches_are_checked_too(compiled_cond):
    assert stitched_graph_violations(compiled_cond.graph_module) == []
    branch = compiled_cond.graph_module.false_graph_0
    engine = next(n for n in branch.graph.nodes if n.op == "call_module")
    engine.args = (engine,)  # reads itself: lint fails
    (violation,) = stitched_graph_violations(compiled_cond.graph_module)
    assert violation.rule == "stitched_graph" and violation.branch == "false_graph_0"


@pytest.mark.slow
def test_branch_conversions_are_compared_for_determinism(cond_model):
    model, inputs = cond_model
    first = convert(model, inputs, trtcheck.Settings(min_block_size=5), check_shapes=False)
    again = convert(model, inputs, trtcheck.Settings(min_block_size=5), check_shapes=False)
    assert set(first.branches) == set(BRANCHES) and branch_determinism_violations(first.branches, again.branches) == []
    again.branches["true_graph_0"].onnx_models[0] += b"\0"
    (violation,) = branch_determinism_violations(first.branches, again.branches)
    assert (violation.rule, violation.branch, violation.segment) == ("determinism", "true_graph_0", 0)


def test_the_repro_of_a_cond_model_loads_with_its_branches(cond_model, tmp_path):
    """A failing verify writes the lowered graph as a repro: its cond node and branch modules must round-trip."""
    model, inputs = cond_model
    folder = write_repro(tmp_path, trtcheck.lower(model, inputs), inputs, trtcheck.Settings(), "onnxruntime", "a failure")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    assert isinstance(loaded.true_graph_0, torch.fx.GraphModule)
    for x in _both_signs(model):
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x))
