"""The pytest plugin, tested the way users meet it: downstream test files run by pytester."""

from __future__ import annotations

import re

import pytest

DOWNSTREAM = """
import torch
import trtcheck

class Small(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x * 2 + 1)
        return torch.lgamma(y.abs() + 1) + y.sum(dim=1, keepdim=True)

def test_mine(trtcheck_verify):
    report = trtcheck_verify(Small().eval(), (torch.randn(2, 3),))
    assert report.passed
"""


def test_without_the_flag_trtcheck_tests_are_skipped_with_a_reason(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*run with --trtcheck*"])


@pytest.mark.slow
def test_with_the_flag_a_downstream_test_runs_across_the_presets(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", "-v")
    # The default presets that apply to a user's model (torch_module needs a zoo submodule path).
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_mine?min_block_size_1? PASSED*", "*test_mine?torch_relu? PASSED*"])


@pytest.mark.slow
def test_presets_come_from_the_option_or_the_ini_file(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", "--trtcheck-settings", "naive,torch_add", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_mine?naive? PASSED*", "*test_mine?torch_add? PASSED*"])
    pytester.makeini("[pytest]\ntrtcheck_settings = min_block_size_3\n")
    result = pytester.runpytest("--trtcheck", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_mine?min_block_size_3? PASSED*"])


def test_an_unknown_preset_is_a_usage_error_with_suggestions(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", "--trtcheck-settings", "min_block_size_2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown trtcheck preset 'min_block_size_2'*Did you mean*min_block_size_1*"])


def test_zoo_models_are_selected_by_glob(pytester):
    pytester.makepyfile(test_zoo="""
def test_zoo(trtcheck_model_entry, trtcheck_settings):
    assert trtcheck_settings is not None
""")
    result = pytester.runpytest(
        "--trtcheck", "--trtcheck-models", "seed_*,tuple_output", "--trtcheck-settings", "torch_module,min_block_size_1", "-v"
    )
    # seed_lgamma and tuple_output have no fallback submodule: torch_module does not apply to them.
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_zoo?seed_lgamma-min_block_size_1? PASSED*", "*test_zoo?tuple_output-min_block_size_1? PASSED*"])
    result = pytester.runpytest("--trtcheck", "--trtcheck-models", "resnet9000")
    result.stderr.fnmatch_lines(["*'resnet9000' matches no zoo model*"])


def test_a_wrong_converter_is_caught_and_leaves_a_repro(pytester, tmp_path):
    pytester.makeconftest("""
import pytest
import torch
import trtcheck.conversion as converters

def mul_as_add(ctx, node):  # deliberately wrong: the harness must catch it
    return ctx.add("Add", [ctx.name(node.args[0]), ctx.name(node.args[1], dtype=ctx.meta(node).dtype)])

@pytest.fixture(autouse=True)
def wrong_mul():
    with converters.Snapshot():  # the registry is restored afterwards (pytester runs in this process)
        converters.register(torch.ops.aten.mul.Tensor, override=True)(mul_as_add)
        yield
""")
    pytester.makepyfile(test_down=DOWNSTREAM)
    report_dir = tmp_path / "reports"
    result = pytester.runpytest("--trtcheck", "--trtcheck-settings", "min_block_size_1", "--trtcheck-report", str(report_dir))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E * trtcheck.errors.VerificationError: trtcheck verification of test_mine[[]min_block_size_1[]]: FAILED",
        "*outputs differ from eager*", "*repro: python*repro.py*",
    ])
    repros = list(report_dir.glob("*/repro.py"))
    assert len(repros) == 1


def test_trtcheck_compile_fixture_returns_a_stitched_module(pytester):
    pytester.makepyfile(test_downstream_compile="""
import torch

def test_compiled(trtcheck_compile, trtcheck_settings):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    compiled = trtcheck_compile(model, (x,))
    assert compiled.partition.settings is trtcheck_settings
    torch.testing.assert_close(compiled(x), model(x))
""")
    result = pytester.runpytest("--trtcheck", "--trtcheck-settings", "min_block_size_1,torch_relu", "--trtcheck-backend", "onnxruntime")
    result.assert_outcomes(passed=2)


MATRIX_PAIRS = """
def test_pair(trtcheck_model_entry, trtcheck_preset, worker_id):
    pass
"""


@pytest.mark.slow
def test_under_xdist_each_zoo_model_runs_on_one_worker(pytester):
    """``-n 2`` hands a zoo model's presets to one worker (``ModelScheduling``), which then lowers it once; under
    xdist's own ``load`` they alternated between the workers (checked: this failed with the hook returning None)."""
    pytester.makepyfile(test_pairs=MATRIX_PAIRS)
    models = "tuple_output,counter,module_fallback,scalar_input,list_input,dict_output"
    result = pytester.runpytest_subprocess("--trtcheck", "-n", "2", "-v", "-p", "no:randomly", f"--trtcheck-models={models}")
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        match = re.search(r"\[(gw\d)\].*test_pair\[(\w+)-\w+\]", line)
        if match:
            workers.setdefault(match.group(2), set()).add(match.group(1))
    assert sorted(workers) == sorted(models.split(",")), result.outlines
    assert all(len(found) == 1 for found in workers.values()), workers
    assert len(set().union(*workers.values())) == 2, workers  # and both workers had work


def test_model_scope_groups_a_zoo_models_tests_and_nothing_else():
    from trtcheck.testing.scheduling import model_scope

    models = frozenset({"resnet18", "hf_bert"})
    assert model_scope("t.py::test_zoo_model[resnet18-torch_relu]", models) == "t.py::test_zoo_model[resnet18"
    assert model_scope("t.py::test_zoo_model[resnet18-torch_relu-fp16]", models) == "t.py::test_zoo_model[resnet18"
    assert model_scope("t.py::test_compiles[hf_bert]", models) == "t.py::test_compiles[hf_bert"
    assert model_scope("t.py::test_zoo_model[resnet50-torch_relu]", models) == "t.py::test_zoo_model[resnet50-torch_relu]"
    assert model_scope("t.py::test_other", models) == "t.py::test_other"
    assert model_scope("t.py::test_x[1-resnet18]", models) == "t.py::test_x[1-resnet18]"


@pytest.mark.slow
def test_works_under_xdist(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest_subprocess("--trtcheck", "-n", "2")
    result.assert_outcomes(passed=3)


def test_work_order_hands_out_lone_tests_first_then_the_largest_units():
    from trtcheck.testing.scheduling import model_scope, work_order

    models = frozenset({"a", "b", "c"})
    collection = [
        "m.py::test_zoo[a-p1]", "m.py::test_zoo[a-p2]", "m.py::test_zoo[a-p3]",
        "m.py::test_zoo[b-p1]", "m.py::test_zoo[b-p2]", "m.py::test_zoo[b-p3]", "m.py::test_zoo[b-p4]",
        "f.py::test_fuzz", "m.py::test_zoo[c-p1]", "m.py::test_zoo[c-p2]", "g.py::test_graphs[x]",
    ]
    units: dict[str, list[str]] = {}
    for nodeid in collection:
        units.setdefault(model_scope(nodeid, models), []).append(nodeid)
    assert work_order(units) == [
        "f.py::test_fuzz", "g.py::test_graphs[x]",  # lone tests, as collected
        "m.py::test_zoo[b", "m.py::test_zoo[a", "m.py::test_zoo[c",  # the smallest unit last
    ]
