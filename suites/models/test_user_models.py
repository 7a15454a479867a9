"""Issue 21: the defects that models users write hit, one regression test each (the matrix runs the new zoo entries
under every preset: suites/matrix/test_user_models.py).

Each test names its defect's number in the issue; each failed on the code before its fix (the closing note of
issue 21 gives the message it failed with).
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

import trtcheck
import trtcheck_zoo
from trtcheck import Target
from trtcheck.errors import UnmatchedOpError

ONE = trtcheck.Settings(min_block_size=1)


# --- defect 1: a state update reordered before a read of the old state ------------------------------------------
class History(nn.Module):
    """Reads the sum of a history buffer, then writes a new row into it in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("hist", torch.randn(2, 4, 8))
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        previous = self.hist.sum(1)
        self.hist.index_copy_(1, pos, torch.relu(self.linear(x)).unsqueeze(1))
        return self.linear(previous) * 2 + self.hist.mean(1)


@pytest.mark.parametrize("segmentation", ["naive", "dependency_aware", "optimal"])
@pytest.mark.parametrize("forced", [[], pytest.param(["aten::relu"], marks=pytest.mark.slow)])
@pytest.mark.parametrize("entry", [pytest.param("kv_cache_step", marks=pytest.mark.slow), "history"])
def test_reads_of_state_stay_before_the_write_that_follows_them(entry, forced, segmentation):
    if entry == "history":
        model, inputs = History().eval(), (torch.randn(2, 8), torch.tensor([1]))
    else:
        model, inputs = trtcheck_zoo.get(entry).build()
    settings = trtcheck.Settings(min_block_size=1 if not forced else 2, torch_executed_ops=forced, segmentation=segmentation)
    trtcheck.verify(model, inputs, settings)  # optimal once ran copy_ before the engine reading the old state


def test_the_invariants_fail_a_partition_that_runs_a_write_before_an_earlier_read():
    model, inputs = trtcheck_zoo.get("kv_cache_step").build()
    partition = trtcheck.partition(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"]))
    assert not trtcheck.check_invariants(partition)
    # Move the write (copy_, in a Torch segment) to the front, where it runs before every read of the old cache.
    writer = next(segment for segment in partition.segments if any(node.target is torch.ops.aten.copy_.default for node in segment.nodes))
    partition.segments.remove(writer)
    partition.segments.insert(0, writer)
    rules = {violation.rule for violation in trtcheck.check_invariants(partition)}
    assert "state_order" in rules, rules


# --- defect 2: weights changed after compile ----------------------------------------------------------------
@pytest.mark.parametrize("settings", [ONE, trtcheck.Settings(min_block_size=1, torch_executed_modules=["second"])], ids=["engine", "torch"])
def test_a_compiled_module_keeps_the_weights_it_was_compiled_with(settings):
    """Reloading the model's weights changes neither its engines nor its Torch segments: the compiled module
    computes the old model, never a mix of old engine weights and new Torch weights."""
    model, (x,) = trtcheck_zoo.get("reloaded_weights").build()
    with torch.no_grad():
        old = model(x)
    compiled = trtcheck.compile(model, (x,), settings)
    if settings.torch_executed_modules:
        assert any(segment.target is Target.TORCH for segment in compiled.partition.segments)
    new = {name: torch.randn_like(value) for name, value in model.state_dict().items()}
    model.load_state_dict(new)
    with torch.no_grad():
        assert not torch.allclose(model(x), old)
        torch.testing.assert_close(compiled(x), old)


# --- defect 3: grad mode on at call time --------------------------------------------------------------------
class EmbeddingMaxNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 4, max_norm=1.0)
        self.linear = nn.Linear(4, 4)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self.linear(self.embedding(indices))


@pytest.mark.slow
def test_an_embedding_with_max_norm_runs_with_autograd_on():
    indices = torch.tensor([[1, 2, 3]])
    report = trtcheck.verify(EmbeddingMaxNorm().eval(), (indices,), ONE)  # calls the compiled module with grad on too
    compiled = trtcheck.compile(EmbeddingMaxNorm().eval(), (indices,), ONE)
    assert compiled(indices).shape == (1, 3, 4)  # grad mode on: raised "a leaf Variable that requires grad..."
    assert report.passed


def test_a_compiled_module_that_fails_with_autograd_on_fails_verify(monkeypatch):
    """The check itself: a compiled module that raises only with autograd on is a ``grad_mode`` violation."""
    from trtcheck.runtime.module import CompiledModule

    original = CompiledModule.forward

    def only_without_grad(self, *args, **kwargs):
        if torch.is_grad_enabled():
            raise RuntimeError("broken with autograd on")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CompiledModule, "forward", only_without_grad)
    with pytest.raises(trtcheck.VerificationError, match=r"\[grad_mode\] calling the compiled module with autograd on failed"):
        trtcheck.verify(EmbeddingMaxNorm().eval(), (torch.tensor([[1, 2, 3]]),), ONE)


# --- defect 4: eager differs between grad modes -------------------------------------------------------------
@pytest.mark.slow
def test_a_transformer_whose_fast_path_differs_is_named_with_the_fix():
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = nn.TransformerEncoder(layer, 2).eval()  # as users write it: nested tensors, the fast path under no_grad

    class Padded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model

        def forward(self, x, mask):
            return self.encoder(x, src_key_padding_mask=mask)

    x, mask = torch.randn(2, 6, 16), torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 3:] = True
    with pytest.raises(trtcheck.VerificationError) as failure:
        trtcheck.verify(Padded().eval(), (x, mask), inputs=[(torch.randn(2, 6, 16), mask)])
    report = failure.value.report
    grad_mode = [v for v in report.violations if v.rule == "grad_mode"]
    assert grad_mode and "set_fastpath_enabled(False)" in grad_mode[0].message
    assert all(comparison.passed for comparison in report.comparisons)  # compared with what export traced


# --- defect 5: random ops seeded inside forward ---------------------------------------------------------------
class SeededNoise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)  # eager: the same noise on every call
        return self.linear(x) + torch.randn(x.shape) * 0.1


def test_random_ops_seeded_inside_forward_are_named_with_advice_that_works():
    with pytest.raises(trtcheck.NondeterministicModelError, match=r"aten\.randn.*seeded inside forward") as failure:
        trtcheck.verify(SeededNoise().eval(), (torch.randn(2, 8),), ONE)
    assert "pass them in as inputs" in str(failure.value)


# --- defect 8: forced ops that lowering would decompose -----------------------------------------------------
class Ops(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.conv = nn.Conv1d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.linear(x))
        h = torch.softmax(h, -1) + torch.log_softmax(h, -1)
        h = h.masked_fill(h > 0.5, 0.0)
        return self.conv(h.view(2, 2, 4)).flatten(1)


@pytest.mark.parametrize(
    "op",
    [
        "aten::linear", "aten::log_softmax",
        *(pytest.param(op, marks=pytest.mark.slow) for op in ("aten::softmax", "aten::layer_norm", "aten::masked_fill", "aten::conv1d")),
    ],
)
def test_a_forced_op_survives_lowering_and_runs_in_pytorch(op):
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=[op])
    report = trtcheck.verify(Ops().eval(), (torch.randn(2, 8),), settings)
    forced = [node for node, reason in report.partition.reasons.items() if reason.kind is trtcheck.ReasonKind.FORCED_OP]
    assert forced and all(str(node.target).startswith(op.replace("::", ".")) for node in forced), forced


def test_a_forced_op_the_model_does_not_call_is_refused():
    with pytest.raises(UnmatchedOpError, match=r"'aten::relu' matches no node of the lowered graph"):
        trtcheck.compile(Ops().eval(), (torch.randn(2, 8),), trtcheck.Settings(torch_executed_ops=["aten::relu"]))


# --- defect 9: autograd inside forward -------------------------------------------------------------------------
def test_a_forward_that_runs_autograd_compiles_and_verifies():
    model, inputs = trtcheck_zoo.get("force_field").build()
    report = trtcheck.verify(model, inputs, ONE)  # was "the example inputs do not fit": eager ran under no_grad
    assert report.partition.segments_of(Target.TENSORRT)


def test_a_forward_that_runs_autograd_with_dynamic_shapes_says_what_to_do():
    model, inputs = trtcheck_zoo.get("force_field").build()
    with pytest.raises(trtcheck.LoweringError, match=r"runs autograd.*drop dynamic_shapes"):
        trtcheck.compile(model, inputs, dynamic_shapes=({0: torch.export.Dim("atoms", min=2, max=16)},))


# --- defect 10: ExportedProgram and .pt2 as inputs of compile and verify ----------------------------------------
@pytest.mark.slow
def test_an_exported_program_and_its_pt2_file_compile_and_verify(tmp_path):
    model, inputs = trtcheck_zoo.get("reloaded_weights").build()
    program = torch.export.export(model, inputs)
    path = tmp_path / "model.pt2"
    torch.export.save(program, path)
    for source in (program, path, str(path)):
        compiled = trtcheck.compile(source)  # the program's own example inputs
        with torch.no_grad():
            torch.testing.assert_close(compiled(*inputs), model(*inputs))
        assert trtcheck.verify(source, inputs).passed
        assert trtcheck.partition(source, inputs).segments


# --- defect 11: deepcopy and torch.save --------------------------------------------------------------------
def test_a_deep_copy_has_its_own_state_and_shares_its_engines():
    model, inputs = trtcheck_zoo.get("counter").build()
    compiled = trtcheck.compile(model, inputs, ONE)
    twin = copy.deepcopy(compiled)
    assert [e for e in twin.engines.values()] == [e for e in compiled.engines.values()]  # shared, read-only
    first = compiled(*inputs)
    torch.testing.assert_close(twin(*inputs), first)  # the twin's counter started where compiled's did
    assert not torch.allclose(compiled(*inputs), first)  # compiled's own counter moved on


def test_saving_a_compiled_module_is_refused_with_the_supported_way():
    model, inputs = trtcheck_zoo.get("reloaded_weights").build()
    compiled = trtcheck.compile(model, inputs, ONE)
    with pytest.raises(trtcheck.TrtcheckError, match=r"torch\.export\.save"):
        torch.save(compiled, io.BytesIO())


# --- defect 12: keyword calls bound as Python binds them -----------------------------------------------------
class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.relu(self.linear(x)) * scale


def test_keyword_calls_and_explicit_defaults_are_bound_like_python_binds_them():
    model, x = Scaled().eval(), torch.randn(2, 4)
    compiled = trtcheck.compile(model, (x,), ONE)
    with torch.no_grad():
        expected = model(x)
        for call in (lambda: compiled(x=x), lambda: compiled(x, scale=1.0), lambda: compiled(x, 1.0)):
            torch.testing.assert_close(call(), expected)
    with pytest.raises(trtcheck.InputMismatchError, match=r"'scale' is 2\.0.*left at its default"):
        compiled(x, scale=2.0)
