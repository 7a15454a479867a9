"""A compiled module is right for every call, not only for its example (issue: state, scalars, strides, aliasing).

Each test pins one way a compiled module used to be right only for the example it was compiled with; each
failed on the code before the fix. The fixtures ``engine_calls`` and ``restrides`` count what a call ran, so
a compiled module that silently ran the whole model in PyTorch (or skipped a layout restore) fails too.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
import trtcheck_zoo as models
from trtcheck.runtime import stitch

ONE = trtcheck.Settings(min_block_size=1)


@pytest.fixture
def restrides(monkeypatch):
    """``(strides before, strides after)`` of every layout restore a stitched graph made on an engine output
    (``restride``, which ``restride_in_order`` calls too). Patched before compiling: stitching puts the counting
    one into the graph."""
    made: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    restride = stitch.restride

    def counting(tensor, stride):
        result = restride(tensor, stride)
        made.append((tuple(tensor.stride()), tuple(result.stride())))
        return result

    monkeypatch.setattr(stitch, "restride", counting)
    return made


def _engines_ran_once(compiled, engine_calls):
    """Every engine of ``compiled`` ran exactly once in the call just made (and nothing else did): then clear."""
    assert compiled.engines, "nothing was compiled to an engine"
    assert engine_calls == sorted(compiled.engines), "each engine must run once per call (none ran: the call ran in PyTorch)"
    engine_calls.clear()


class TwoInputs(nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.lgamma(x), x + y, x * y])


def test_aliased_example_inputs_compile_a_module_right_for_independent_inputs(engine_calls):
    x = torch.rand(2, 3) + 0.5
    compiled = trtcheck.compile(TwoInputs(), (x, x), ONE, backend="onnxruntime")
    engine_calls.clear()
    y = torch.rand(2, 3) + 0.5
    torch.testing.assert_close(compiled(x, y), TwoInputs()(x, y))
    _engines_ran_once(compiled, engine_calls)


@pytest.mark.slow
def test_shape_analysis_runs_on_the_example_inputs_not_random_ones():
    model, (a, b) = models.get("spd_solve").build()
    compiled = trtcheck.compile(model, (a, b), ONE, backend="onnxruntime")  # random inputs make cholesky raise
    torch.testing.assert_close(compiled(a, b), model(a, b))


def test_verify_says_when_eager_fails_on_generated_inputs_and_takes_input_sets():
    entry = models.get("spd_solve")
    model, inputs = entry.build()
    with pytest.raises(trtcheck.InputDomainError, match=r"(?s)eager SpdSolve itself fails on input set 2.*inputs=\["):
        trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
    report = trtcheck.verify(model, inputs, ONE, backend="onnxruntime", inputs=entry.input_sets())
    assert len(report.comparisons) == 2 + len(entry.input_sets())


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_compile_leaves_a_stateful_model_as_it_found_it_and_updates_its_own_state(engine_calls):
    model, (x,) = models.get("counter").build()
    before = _state(model)
    compiled = trtcheck.compile(model, (x,), ONE, backend="onnxruntime")
    after = _state(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert compiled.partition.segments_of(trtcheck.Target.TENSORRT), "the buffer's reader must run in an engine"
    engine_calls.clear()
    for call in range(1, 4):  # eager returns 1x, 2x, 3x: the engine must read the buffer's current value
        torch.testing.assert_close(compiled(x), model(x), msg=f"call {call}")
        _engines_ran_once(compiled, engine_calls)
    assert float(model.calls) == 3.0


@pytest.mark.parametrize("call", [((2.5,), {"shift": 1}), ((5.0,), {"shift": 1}), ((2.5,), {"shift": 7})])
def test_scalar_inputs_are_checked_never_frozen(call, engine_calls):
    model, (x, scale) = models.get("scalar_input").build()
    compiled = trtcheck.compile(model, (x, scale), ONE, backend="onnxruntime", example_kwargs={"shift": 1})
    engine_calls.clear()
    args, kwargs = call
    try:
        got = compiled(x, *args, **kwargs)
    except trtcheck.InputMismatchError as error:  # refusing a value it was not compiled for is sound
        assert (args, kwargs) != ((2.5,), {"shift": 1})
        assert "scale" in str(error) or "shift" in str(error)
        assert engine_calls == [], "a refused call must be refused before any engine runs"
        return
    torch.testing.assert_close(got, model(x, *args, **kwargs))
    _engines_ran_once(compiled, engine_calls)


def test_a_different_scalar_is_refused_with_the_fix():
    model, (x, scale) = models.get("scalar_input").build()
    compiled = trtcheck.compile(model, (x, scale), ONE, backend="onnxruntime")
    with pytest.raises(trtcheck.InputMismatchError, match=r"input 'scale' is 5.0.*compiled with scale=2.5.*0-d tensor"):
        compiled(x, 5.0)


class AsStrided(nn.Module):
    class Tail(nn.Module):
        def forward(self, y):
            return torch.as_strided(y, (6, 4), (1, 6)) * 3

    def __init__(self):
        super().__init__()
        self.tail = self.Tail()

    def forward(self, x):
        return self.tail(torch.relu(x.t()))


class ElementwiseTail(nn.Module):
    """Like ``layout_sensitive``, but its Torch tail reads any layout: a missing restore changes no value,
    only the output's strides (which ``assert_close`` does not compare), so only counting restores sees it."""

    class Tail(nn.Module):
        def forward(self, y):
            return y * 2

    def __init__(self):
        super().__init__()
        self.tail = self.Tail()

    def forward(self, x):
        return self.tail(torch.relu(x.t() + 1.0))


TRANSPOSED = ((4, 1), (1, 6))
"""The one layout restore of each model below at a (4, 6) input: the engine returns the (6, 4) ``relu`` of
``x.t()`` contiguous, and the Torch tail was traced on the transposed strides eager gave it."""


@pytest.mark.parametrize("name_or_model", ["layout_sensitive", "as_strided", "elementwise_tail"])
def test_torch_segments_get_the_strides_export_recorded(name_or_model, engine_calls, restrides):
    if name_or_model == "as_strided":
        model, inputs = AsStrided(), (torch.randn(4, 6),)
    elif name_or_model == "elementwise_tail":
        model, inputs = ElementwiseTail(), (torch.randn(4, 6),)
    else:
        model, inputs = models.get(name_or_model).build()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=["tail"])
    compiled = trtcheck.compile(model, inputs, settings, backend="onnxruntime")
    assert [s.target for s in compiled.partition.segments] == [trtcheck.Target.TENSORRT, trtcheck.Target.TORCH]
    engine_calls.clear()
    restrides.clear()
    torch.testing.assert_close(compiled(*inputs), model(*inputs))
    _engines_ran_once(compiled, engine_calls)
    assert restrides == [TRANSPOSED], "the engine's contiguous output must get the strides export recorded"


@pytest.mark.parametrize("name_or_model", ["layout_sensitive", "elementwise_tail"])
def test_an_engine_output_of_dynamic_shape_gets_the_recorded_dim_order(name_or_model, engine_calls, restrides):
    """With a dynamic size the recorded layout is an order of dims (``restride_in_order``), made dense per call."""
    if name_or_model == "elementwise_tail":
        model, x = ElementwiseTail(), torch.randn(4, 6)
    else:
        model, (x,) = models.get(name_or_model).build()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=["tail"])
    rows = torch.export.Dim("rows", min=2, max=16)
    compiled = trtcheck.compile(model, (x,), settings, backend="onnxruntime", dynamic_shapes=({0: rows},))
    assert "restride_in_order" in compiled.graph_module.code
    for n in (3, 9):
        engine_calls.clear()
        restrides.clear()
        call = torch.randn(n, 6)
        torch.testing.assert_close(compiled(call), model(call))
        _engines_ran_once(compiled, engine_calls)
        assert restrides == [((n, 1), (1, 6))], f"rows={n}: the engine's (6, {n}) output must get the transposed layout"


def test_a_non_contiguous_call_input_gets_the_example_layout(engine_calls, restrides):
    model, (x,) = models.get("layout_sensitive").build()
    compiled = trtcheck.compile(model, (x,), trtcheck.Settings(min_block_size=1, torch_executed_modules=["tail"]))
    engine_calls.clear()
    restrides.clear()
    strided = torch.randn(6, 4).t()  # same shape, transposed strides
    torch.testing.assert_close(compiled(strided), model(strided))
    _engines_ran_once(compiled, engine_calls)
    assert restrides == [TRANSPOSED]  # the input's own restride is the signature's, not counted here


def test_a_module_list_named_by_its_attribute_is_forced_to_torch():
    model, inputs = models.get("module_list_blocks").build()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=["blocks"])
    partition = trtcheck.partition(model, inputs, settings)
    inside = {
        n for n in partition.compute_nodes if any(path.startswith("blocks.") for path, _ in n.meta.get("nn_module_stack", {}).values())
    }
    assert len(inside) >= 3 * 2  # a linear and a gelu in each of three blocks
    for node in partition.compute_nodes:
        forced = partition.reasons[node].kind is trtcheck.ReasonKind.FORCED_MODULE
        assert forced == (node in inside), partition.explain([node])
        if forced:
            assert partition.target_of(node) is trtcheck.Target.TORCH


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path, monkeypatch):
    """Every ```python block of README.md runs (the README's own example once passed aliased inputs). The block
    the README introduces as the user's ``mymodels/nets.py`` is written there, as the user would, and imported
    by the blocks after it."""
    import pathlib
    import re

    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    text = readme.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    package = re.search(r"`mymodels/nets.py`.*?```python\n(.*?)```", text, flags=re.S)
    if package:
        (tmp_path / "mymodels").mkdir()
        (tmp_path / "mymodels" / "__init__.py").write_text("")
        (tmp_path / "mymodels" / "nets.py").write_text(package.group(1))
        monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(readme), "exec"), namespace)  # the README is this repository's own


def test_the_layout_check_catches_an_engine_output_without_its_recorded_strides():
    """verify's stitched-graph check: a Torch user reading an engine's contiguous output as it is, where
    export recorded other strides, is a ``layout`` violation (here: the restride removed by hand)."""
    from trtcheck.runtime.stitch import restride
    from trtcheck.verification.verify import stitched_graph_violations

    model, inputs = models.get("layout_sensitive").build()
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_modules=["tail"]))
    graph_module = compiled.graph_module
    assert stitched_graph_violations(graph_module) == []
    for node in list(graph_module.graph.nodes):
        if node.op == "call_function" and node.target is restride:
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
    violations = stitched_graph_violations(graph_module)
    assert [v.rule for v in violations] == ["layout"], violations


def test_verify_catches_a_module_that_answers_for_the_examples_scalar(monkeypatch):
    """If the input check let another scalar through (as before), the frozen constant would answer wrong:
    verify varies each scalar input and reports ``scalar_input``."""
    from trtcheck.runtime.signature import InputSignature

    monkeypatch.setattr(InputSignature, "check", lambda self, args, kwargs: None)
    model, inputs = models.get("scalar_input").build()
    with pytest.raises(trtcheck.VerificationError, match=r"\[scalar_input\].*scale=7.25 \(compiled with 2.5\)"):
        trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
