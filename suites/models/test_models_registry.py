"""The zoo registry API: lookup, globbing, tags, registration, determinism of factories."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck_zoo as models
from trtcheck_zoo import registry


@pytest.fixture
def scratch_zoo(monkeypatch):
    """Register test entries in a copy of the zoo, so the real one is left as it was."""
    monkeypatch.setattr(registry, "_ZOO", dict(registry._ZOO))


def _tiny_factory():
    return nn.Linear(2, 2).eval(), (torch.ones(1, 2),)


def test_default_zoo_covers_every_builtin_entry():
    assert len(models.DEFAULT_ZOO) == len(set(models.DEFAULT_ZOO)) == 53
    assert models.names() == list(models.DEFAULT_ZOO)
    assert models.DEFAULT_ZOO[:2] == ("resnet18", "resnet50")


def test_names_glob_and_tags():
    assert models.names("resnet*") == ["resnet18", "resnet50", "resnet18_dynamic_batch"]
    assert models.names(tags=["dynamic"]) == ["resnet18_dynamic_batch", "transformer_encoder_dynamic_seq"]
    assert models.names(tags=["control_flow"]) == ["cond_branches", "while_loop_body"]
    assert models.names("mobilenet_v?") == ["mobilenet_v2"]
    assert models.names("resnet") == []  # a plain name matches only itself
    assert models.names(tags=["heavy"]) == ["vit_b_16", "vgg11"]
    assert models.names("*net*", tags=["transformer"]) == []
    assert "vgg11" not in models.names(exclude_tags=["heavy"])
    assert models.names(tags=["transformer"]) == ["vit_b_16", "swin_t", "transformer_encoder_dynamic_seq"]


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("resnet", "'resnet18'"), ("mobilenetv2", "'mobilenet_v2'"), ("seed_lgama", "'seed_lgamma'")],
)
def test_unknown_name_suggests_close_matches(name, suggestion):
    with pytest.raises(KeyError, match=f"no zoo entry named '{name}'; did you mean .*{suggestion}"):
        models.get(name)


def test_unknown_name_without_close_match_points_to_names():
    with pytest.raises(KeyError, match=r"see models.names\(\)"):
        models.get("zzzzzz")


def test_register_and_duplicates(scratch_zoo):
    entry = models.register(models.ZooEntry("tiny", _tiny_factory, ("test",)))
    assert models.get("tiny") is entry and entry.tags == frozenset({"test"})
    assert models.names(tags=["test"]) == ["tiny"]
    with pytest.raises(ValueError, match="already registered"):
        models.register(models.ZooEntry("tiny", _tiny_factory))
    replacement = models.register(models.ZooEntry("tiny", _tiny_factory), override=True)
    assert models.get("tiny") is replacement


def test_tags_must_not_be_a_bare_string():
    with pytest.raises(TypeError, match="tags must be an iterable"):
        models.ZooEntry("bad", _tiny_factory, "fallback")


def test_seeded_factories_leave_the_global_rng_alone():
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    models.get("seed_lgamma").factory()
    assert torch.equal(torch.rand(3), expected)


def test_seeded_sets_eval_mode_and_tuple_inputs():
    @models.seeded(7)
    def factory():
        return nn.Dropout(0.5).train(), [torch.rand(2)]

    model, inputs = factory()
    assert not model.training and isinstance(inputs, tuple)
    assert torch.equal(inputs[0], factory()[1][0])


def test_make_nontrivial_redraws_constant_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(2, 2))
    nn.init.zeros_(model[0].bias)
    nn.init.zeros_(model[2].weight)
    models.make_nontrivial(model, (torch.randn(2, 3, 6, 4),))
    assert not model.training
    assert model[0].bias.abs().min() > 0 and model[2].weight.abs().min() > 0
    assert model[1].momentum == 0.1  # restored after calibration
    assert model[1].num_batches_tracked == 1
def test_every_float32_set_of_the_zoo_names_nodes_of_its_graph_and_says_why():
    """``ZooEntry.fp32_nodes`` (used by the matrix at reduced precision) must name nodes the lowered graph has: a
    lowering change that renames them would otherwise fail every such test with a settings error."""
    import trtcheck
    import trtcheck_zoo

    entries = [trtcheck_zoo.get(name) for name in trtcheck_zoo.names() if trtcheck_zoo.get(name).fp32_nodes]
    assert entries  # seed_lgamma in bf16, at least
    for entry in entries:
        assert entry.precision_notes, entry.name
        model, inputs = entry.build()
        names = {node.name for node in trtcheck.lower(model, inputs).graph.nodes}
        for precision, nodes in entry.fp32_nodes.items():
            assert precision in ("fp16", "bf16") and set(nodes) <= names, (entry.name, precision, nodes)


def test_quantized_entries_are_opt_in_every_model_leaves_them_out_a_pattern_or_tag_naming_them_selects_them():
    if models.QUANTIZED_UNAVAILABLE:
        pytest.skip(models.QUANTIZED_UNAVAILABLE)
    assert models.QUANTIZED_ZOO and all(name.startswith("quantized_") for name in models.QUANTIZED_ZOO)
    assert not set(models.QUANTIZED_ZOO) & set(models.names()) and models.names("*") == models.names()
    assert models.names("quantized_*") == list(models.QUANTIZED_ZOO) == models.names(tags=["quantized"])
    assert models.names("quantized_resnet18_int8") == ["quantized_resnet18_int8"]
    assert {"quantized", "int8", "torchvision"} <= models.get("quantized_resnet18_int8").tags
