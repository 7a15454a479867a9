"""The hand-written fallback models compute what they claim and put unsupported ops in the graph."""

from __future__ import annotations

import pytest
import torch

import trtcheck_zoo as models

LGAMMA = torch.ops.aten.lgamma.default


def _core_aten_targets(name: str) -> set:
    model, inputs = models.get(name).factory()
    program = torch.export.export(model, inputs).run_decompositions()
    return {node.target for node in program.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize("name", [n for n in models.FALLBACK_ZOO if n != "module_fallback"])
def test_fallback_models_export_with_an_unsupported_op(name):
    """Each one exports to core ATen with lgamma in it: the op that forces a PyTorch segment."""
    assert LGAMMA in _core_aten_targets(name)


def test_fallback_models_are_tagged():
    assert set(models.names(tags=["fallback"])) == set(models.FALLBACK_ZOO)
    assert models.get("module_fallback").fallback_module == "block"


def test_seed_lgamma_matches_its_definition():
    model, (x, y) = models.get("seed_lgamma").factory()
    assert (x > 0).all() and (y > 0).all()
    expected = torch.cat([torch.lgamma(x), torch.lgamma(y), torch.lgamma(x / y), x + y, x * y], 0)
    torch.testing.assert_close(model(x, y), expected)


def test_pytree_models_keep_their_structure():
    model, inputs = models.get("dict_output").factory()
    assert set(model(*inputs)) == {"logits", "features"}
    model, inputs = models.get("tuple_output").factory()
    assert isinstance(model(*inputs), tuple) and len(model(*inputs)) == 3
    model, (xs,) = models.get("list_input").factory()
    assert isinstance(xs, list) and len(xs) == 3
    assert model(xs).shape == xs[0].shape


def test_multi_output_ops_return_int64_across_the_cut():
    model, inputs = models.get("multi_output_ops").factory()
    mixed, indices, rest = model(*inputs)
    assert indices.dtype == torch.int64 and mixed.dtype == rest.dtype == torch.float32


def test_residual_block_has_batch_norm_statistics_that_matter():
    """Calibrated running stats: far from the (0, 1) defaults that make eval-mode BN a no-op."""
    model, _ = models.get("residual_unsupported").factory()
    for bn in (model.bn1, model.bn2):
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
