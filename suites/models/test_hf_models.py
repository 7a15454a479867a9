"""The ``hf`` zoo family (models/hf_models.py): tiny Hugging Face models built from their configs.

Without ``transformers`` the module registers nothing and says why. With it, every entry builds
deterministically, exports (its dynamic sizes too), and returns ``transformers``' own output class, eagerly,
exported and compiled; at the default settings each compiles to one engine holding every compute node, or
``EXPECTED_TORCH_NODES`` says exactly which nodes stay in PyTorch and the reason ``explain()`` gives, so a
regression (another engine) and an improvement (the reason gone) both fail here until the table says so.
Those tests skip where ``transformers`` is not installed (``pip install -e '.[hf]'``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves

import trtcheck
import trtcheck_zoo as models
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.reasons import ReasonKind
from trtcheck_zoo import hf_models, registry
from trtcheck_zoo.hf_models import HF_UNAVAILABLE, HF_ZOO

needs_transformers = pytest.mark.skipif(HF_UNAVAILABLE is not None, reason=str(HF_UNAVAILABLE))

#: What stays in PyTorch at the default settings, where not nothing: ``{entry: {(reason kind, explain()'s
#: detail): node names}}``. Empty: every entry is one engine at 100% (hf_bert_dynamic_seq was not, until the
#: embedding converter was declared dynamic).
EXPECTED_TORCH_NODES: dict[str, dict[tuple[ReasonKind, str], tuple[str, ...]]] = {}


#: The slowest entries (build, export and compile 5.6-8 s of the file's 70 s on 2 cores, measured with
#: --durations): in the slow tier (``--slow``) only.
SLOW = frozenset({"hf_bert_dynamic_seq", "hf_qwen2", "hf_segformer"})

#: The entries the default tier compiles (3 s each); the slow tier compiles every one.
COMPILED_BY_DEFAULT = frozenset({"hf_bert"})


def _params(names: tuple[str, ...], default: frozenset[str] | None = None) -> list[Any]:
    slow = SLOW if default is None else frozenset(names) - default
    return [pytest.param(name, id=name, marks=[pytest.mark.slow] if name in slow else []) for name in names]


def _output_class() -> type:
    import transformers  # deferred: only where it is installed (needs_transformers)

    return transformers.utils.ModelOutput


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def test_without_transformers_nothing_is_registered_and_the_module_says_why(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_ZOO", dict(registry._ZOO))
    before = dict(registry._ZOO)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "transformers" else find_spec(name, *args))
    spec = importlib.util.spec_from_file_location("trtcheck_zoo._hf_models_without_transformers", hf_models.__file__)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.HF_ZOO == ()
    assert module.HF_UNAVAILABLE == "transformers is not installed, so no hf_* zoo entry is registered: pip install -e '.[hf]'"
    assert registry._ZOO == before


@needs_transformers
def test_the_family_is_registered_with_its_architectures() -> None:
    assert HF_UNAVAILABLE is None
    assert len(HF_ZOO) >= 10
    assert set(HF_ZOO) <= set(models.names(tags=["hf"]))
    for tag in ("encoder", "decoder", "rotary", "gqa", "patch_embedding", "convolutional", "hierarchical",
                "segmentation", "dynamic_seq", "kv_cache"):
        assert models.names("hf_*", tags=["hf", tag]), f"no hf entry is tagged {tag!r}"
    assert set(EXPECTED_TORCH_NODES) <= set(HF_ZOO)


@needs_transformers
@pytest.mark.parametrize("name", _params(HF_ZOO))
def test_entry_builds_deterministically_exports_and_returns_a_transformers_output(name: str) -> None:
    entry = models.get(name)
    model, inputs = entry.build()
    again, again_inputs = entry.build()
    for (key, value), (_, other) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(value, other), f"{name}: {key} differs between two builds"
    assert all(torch.equal(a, b) for a, b in zip(inputs, again_inputs))
    if "text" in entry.tags:  # the attention mask pads: some positions are masked out
        assert not bool(inputs[1].all()), "the attention mask pads nothing"
    with torch.no_grad():
        out = model(*inputs)
        assert isinstance(out, _output_class()), type(out)
        assert all(torch.equal(a, b) for a, b in zip(_tensors(out), _tensors(again(*again_inputs))))
        program = torch.export.export(model, inputs, dynamic_shapes=entry.dynamic_shapes)
        exported = program.module()(*inputs)
    assert type(exported) is type(out)
    for got, want in zip(_tensors(exported), _tensors(out), strict=True):
        torch.testing.assert_close(got, want)


@needs_transformers
@pytest.mark.parametrize("name", _params(HF_ZOO, default=COMPILED_BY_DEFAULT))
def test_entry_compiles_to_one_engine_at_the_default_settings(name: str, record_property) -> None:
    entry = models.get(name)
    model, inputs = entry.build()
    compiled = trtcheck.compile(model, inputs, backend="onnxruntime", dynamic_shapes=entry.dynamic_shapes)
    summary = ExplainSummary.of(compiled.partition)
    record_property("engines", len(summary.engines))
    record_property("op_coverage", f"{summary.coverage:.1f}%")
    print(f"{name}: {summary.engines_line()}; {summary.coverage_line()}")
    with torch.no_grad():
        got, want = compiled(*inputs), model(*inputs)
    assert type(got) is type(want)
    for a, b in zip(_tensors(got), _tensors(want), strict=True):
        torch.testing.assert_close(a, b)
    assert compiled.partition.fallbacks == []
    torch_nodes = {(group.kind, group.detail): group.nodes for group in summary.torch_groups}
    expected = EXPECTED_TORCH_NODES.get(name, {})
    assert torch_nodes == expected, summary.format()
    if not expected:
        assert len(summary.engines) == 1 and summary.coverage == 100.0, summary.format()
    else:
        assert len(summary.engines) > 1 or summary.coverage < 100.0
