"""What lowering checks of its inputs before torch.export runs: a malformed ``dynamic_shapes``, and example inputs
that do not fit an ``ExportedProgram``.

Issue 43, defect 11: ``{5: Dim("b")}`` for a 2-D input reached torch.export, whose ``IndexError`` became "torch.export
could not trace ... make the model exportable", blaming the model; a misspelled key, a non-Dim value or a spec of
the wrong length became "could not keep the dynamic dimensions ... follow export's suggestion", a fix that does
not apply either. Defect 12: an ``ExportedProgram`` given examples of another rank got a raw torch
``RuntimeError`` from ``verify`` and ``compile``, and examples of the right rank but another static size (or
dtype) were accepted, though the program was exported for other sizes. Defect 14: a failed export's own log
(~20 lines of a fake-tensor traceback) went to stderr before trtcheck's error, which already says what failed.
"""

from __future__ import annotations

import logging
import sys

import pytest
import torch
from torch.export import Dim

import trtcheck
from trtcheck.errors import DynamicShapesError, InputMismatchError, LoweringError
from trtcheck.lowering.export import lower

ONE = trtcheck.Settings(min_block_size=1)


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sin()


class Nested(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0].sum() + xs[1].sum()


def pair_inputs(rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, 3), torch.randn(rows, 3)


@pytest.fixture
def no_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.export.export fails the test if called: a malformed dynamic_shapes is refused before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("torch.export.export ran: dynamic_shapes should have been refused before it")

    monkeypatch.setattr(torch.export, "export", refuse)


# --- dynamic_shapes (defect 11) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "inputs", "dynamic_shapes", "match"),
    [
        (Pair(), pair_inputs(), ({5: Dim("b")}, None),
         r"dynamic_shapes\[0\] gives dim 5 of input 'x', which has 2 dims \(shape \(4, 3\)\).*Fix: key each Dim by a dim of "
         r"'x', 0 to 1"),
        (Pair(), pair_inputs(), {"x": {5: Dim("b")}, "y": None}, r"dynamic_shapes\['x'\] gives dim 5 of input 'x', which has 2 dims"),
        (Pair(), pair_inputs(), ({-1: Dim("b")}, None),
         r"dynamic_shapes\[0\] gives dim -1 of input 'x'.*dims are counted from 0: write 1 for the last"),
        (Pair(), pair_inputs(), ({-3: Dim("b")}, None), r"dynamic_shapes\[0\] gives dim -3 of input 'x', which has 2 dims"),
        (Pair(), pair_inputs(), ({"0": Dim("b")}, None), r"dynamic_shapes\[0\] has the key '0', not a dim index.*Fix: key"),
        (Pair(), pair_inputs(), ({0: "b"}, None),
         r"dynamic_shapes\[0\]\[0\] \(dim 0 of input 'x'\) is 'b', a str, not a torch.export.Dim.*Fix: .*Dim\('b'"),
        (Pair(), pair_inputs(), ({0: 2.5}, None), r"dynamic_shapes\[0\]\[0\] \(dim 0 of input 'x'\) is 2.5, a float"),
        (Pair(), pair_inputs(), ((Dim("b"),), None),
         r"dynamic_shapes\[0\] has 1 entry for input 'x', which has 2 dims \(shape \(4, 3\)\).*one per dim"),
        (Pair(), pair_inputs(), ({0: Dim("b")},),
         r"dynamic_shapes has 1 entry, but Pair.forward takes 2 inputs \(x, y\).*Fix: .*None for a static one"),
        (Pair(), pair_inputs(), {"z": {0: Dim("b")}, "y": None},
         r"dynamic_shapes names 'z', which is not an input of Pair.forward \(its inputs: x, y\).*Fix: "),
        (Pair(), pair_inputs(), {"x": {0: Dim("b")}}, r"dynamic_shapes has no entry for input 'y'.*None for a static one"),
        (Pair(), pair_inputs(), Dim("b"), r"dynamic_shapes is a Dim.*a tuple with one entry per input.*or a dict"),
        (Pair(), pair_inputs(), ({0: 5}, None),
         r"dynamic_shapes\[0\]\[0\] fixes dim 0 of input 'x' to 5, but the example's dim 0 is 4.*Fix:"),
        (Pair(), pair_inputs(), ({0: Dim("b", min=8)}, None),
         r"the example's dim 0 of input 'x' is 4, outside the range \[8, inf\] of Dim 'b' \(dynamic_shapes\[0\]\[0\]\).*Fix:"),
        (Nested(), ([torch.randn(2, 3), torch.randn(5)],), ([{0: Dim("a")}, {3: Dim("b")}],),
         r"dynamic_shapes\[0\]\[1\] gives dim 3 of input 'xs\[1\]', which has 1 dim \(shape \(5,\)\)"),
        (Nested(), ([torch.randn(2, 3), torch.randn(5)],), ([{0: Dim("a")}],),
         r"dynamic_shapes\[0\] has 1 entry for input 'xs', a list of 2.*one per item"),
    ],
    ids=[
        "dim_past_the_rank", "dim_past_the_rank_by_name", "negative_dim", "negative_dim_past_the_rank", "key_not_a_dim",
        "value_a_str", "value_a_float", "tuple_spec_too_short", "too_few_entries", "unknown_name", "missing_name", "not_a_container",
        "static_size_not_the_examples", "example_outside_the_dims_range", "nested_dim_past_the_rank", "nested_too_short",
    ],
)
def test_a_malformed_dynamic_shapes_is_refused_before_export_naming_it_and_the_fix(model, inputs, dynamic_shapes, match, no_export):
    with pytest.raises(DynamicShapesError, match=match) as raised:
        lower(model, inputs, dynamic_shapes=dynamic_shapes)
    assert isinstance(raised.value, LoweringError) and isinstance(raised.value, ValueError)
    assert "make the model exportable" not in str(raised.value) and "export's suggestion" not in str(raised.value)


def test_a_well_formed_dynamic_shapes_in_each_form_still_lowers():
    b = Dim("b", min=2, max=16)
    for spec in (({0: b}, {0: b}), {"x": {0: b}, "y": (b, None)}, [(b, 3), (b, None)], ({0: Dim.AUTO}, {0: Dim.AUTO})):
        gm = lower(Pair(), pair_inputs(), dynamic_shapes=spec)
        (x, *_) = [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert isinstance(x.meta["val"].shape[0], torch.SymInt), spec
    lower(Nested(), ([torch.randn(2, 3), torch.randn(5)],), dynamic_shapes=([{0: b}, None],))


def test_a_malformed_dynamic_shapes_through_compile_is_the_same_error(no_export):
    with pytest.raises(DynamicShapesError, match=r"dynamic_shapes\[0\] gives dim 5 of input 'x'"):
        trtcheck.compile(Pair(), pair_inputs(), ONE, backend="onnxruntime", dynamic_shapes=({5: Dim("b")}, None))


# --- example inputs of an ExportedProgram (defect 12) ----------------------------------------------------------


@pytest.fixture(scope="module")
def static_program() -> torch.export.ExportedProgram:
    return torch.export.export(Pair(), pair_inputs())


@pytest.fixture(scope="module")
def dynamic_program() -> torch.export.ExportedProgram:
    batch = Dim("batch", min=2, max=16)
    return torch.export.export(Pair(), pair_inputs(), dynamic_shapes=({0: batch}, {0: batch}))


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ((torch.randn(4, 3, 2), torch.randn(4, 3)),
         r"the example inputs do not fit the exported program: input 'x' is Tensor\[4, 3, 2\] float32, but the program takes "
         r"Tensor\[4, 3\] float32.*Fix: pass example inputs like the ones it was exported with"),
        ((torch.randn(4, 3), torch.randn(5, 3)), r"input 'y': dim 0 is 5, but it is static: 4 in every call"),
        ((torch.randn(4, 3), torch.randn(4, 3, dtype=torch.float64)), r"input 'y' is Tensor\[4, 3\] float64, but the program takes "
         r"Tensor\[4, 3\] float32"),
        ((torch.randn(4, 3),), r"do not fit the exported program: it takes 2 inputs \(x: Tensor\[4, 3\] float32, y: Tensor\[4, 3\] "
         r"float32\), but was given 1 \(Tensor\[4, 3\] float32\)"),
        ((torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)), r"takes 2 inputs .* but was given 3"),
        ((torch.randn(4, 3), 2.0), r"input 'y' is 2.0, a float, but the program takes Tensor\[4, 3\] float32"),
    ],
    ids=["rank", "static_size", "dtype", "too_few", "too_many", "not_a_tensor"],
)
@pytest.mark.parametrize("entry", ["compile", "verify"])
def test_examples_that_do_not_fit_a_static_program_are_an_input_mismatch_naming_what_it_takes(static_program, inputs, match, entry):
    call = trtcheck.compile if entry == "compile" else trtcheck.verify
    with pytest.raises(InputMismatchError, match=match):
        call(static_program, inputs, ONE, backend="onnxruntime")


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (pair_inputs(17), r"input 'x': dim 0 is 17, outside the range of \w+ in \[2, 16\].*takes \(x: Tensor\[\w+ in 2..16, 3\] float32"),
        ((torch.randn(5, 3), torch.randn(6, 3)), r"input 'y': dim 0 is 6, but it is \w+, which 'x' set to 5"),
        ((torch.randn(5, 4), torch.randn(5, 4)), r"input 'x': dim 1 is 4, but it is static: 3 in every call"),
    ],
    ids=["outside_the_range", "inconsistent", "static_dim"],
)
def test_examples_that_do_not_fit_a_dynamic_program_name_its_ranges(dynamic_program, inputs, match):
    with pytest.raises(InputMismatchError, match=match):
        trtcheck.compile(dynamic_program, inputs, ONE, backend="onnxruntime")


def test_examples_of_other_sizes_in_a_dynamic_programs_range_are_accepted(dynamic_program):
    compiled = trtcheck.compile(dynamic_program, pair_inputs(7), ONE, backend="onnxruntime")
    x, y = pair_inputs(9)
    torch.testing.assert_close(compiled(x, y), Pair()(x, y))


def test_a_program_without_examples_uses_its_own(static_program):
    assert trtcheck.verify(static_program, None, ONE, backend="onnxruntime").passed


def test_a_program_exported_with_keyword_inputs_takes_them_in_any_order():
    program = torch.export.export(Pair(), (), {"x": torch.randn(4, 3), "y": torch.randn(4, 3)})
    x, y = pair_inputs()
    compiled = trtcheck.compile(program, (), ONE, backend="onnxruntime", example_kwargs={"y": y, "x": x})
    torch.testing.assert_close(compiled(x=x, y=y), Pair()(x, y))
    with pytest.raises(InputMismatchError, match=r"input 'y': dim 0 is 5, but it is static: 4"):
        trtcheck.compile(program, (), ONE, backend="onnxruntime", example_kwargs={"y": torch.randn(5, 3), "x": x})



class Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor, k: int, xs: list[torch.Tensor]) -> torch.Tensor:
        return x * k + xs[0] + xs[1]


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ((torch.randn(3), 3, [torch.randn(3), torch.randn(3)]), r"input 'k' is 3, but the program was exported with k=2, a constant"),
        ((torch.randn(3), 2, [torch.randn(3), torch.randn(3).double()]), r"input 'xs_1' is Tensor\[3\] float64, but the program takes"),
        ((torch.randn(3), 2, [torch.randn(3)]), r"it takes 4 inputs \(x: Tensor\[3\] float32, k: 2, xs_0: .*but was given 3"),
    ],
    ids=["other_constant", "nested_dtype", "nested_too_few"],
)
def test_a_programs_constant_and_nested_inputs_are_checked_too(inputs, match):
    program = torch.export.export(Scaled(), (torch.randn(3), 2, [torch.randn(3), torch.randn(3)]))
    with pytest.raises(InputMismatchError, match=match):
        trtcheck.compile(program, inputs, ONE, backend="onnxruntime")

# --- torch's own log of a failed export (defect 14) -------------------------------------------------------------


def test_a_failed_export_keeps_torchs_log_on_the_error_not_on_stderr(capfd):
    with pytest.raises(LoweringError, match=r"the example inputs do not fit Linear") as raised:
        lower(torch.nn.Linear(8, 4), (torch.randn(2, 5),))
    assert "failed while attempting to run meta for aten.mm" in raised.value.torch_log
    assert "Traceback" in raised.value.torch_log  # nothing lost: torch's traceback, as torch formats it
    assert capfd.readouterr().err == ""


def test_torchs_log_is_held_back_while_export_runs_and_written_after_a_success(capsys):
    from trtcheck.lowering.export import TorchLog

    logger = logging.getLogger("torch._trtcheck_probe")
    handler = logging.StreamHandler(sys.stderr)  # as torch's handlers do: to stderr
    logger.addHandler(handler)
    logger.propagate = False  # its records reach this handler alone, not torch's too
    try:
        with TorchLog() as log:
            logger.warning("a warning export gave")
            assert capsys.readouterr().err == ""
        assert "a warning export gave" in log.text()
        log.replay()
        assert capsys.readouterr().err == "a warning export gave\n"
        logger.warning("after")
        assert capsys.readouterr().err == "after\n"  # the handlers are back
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
