"""The zoo's user-model entries (``models/user_models.py``: state updated in place, reloaded weights, a padding
mask, autograd in forward) under every preset the zoo matrix does not select by default, ``optimal`` among them:
with ``test_zoo_matrix.py`` that is every preset (issue 21)."""

from __future__ import annotations

import functools

import pytest

import trtcheck
import trtcheck_zoo
from suites.matrix.matrix_checks import check_model, entry_options
from trtcheck.errors import UnmatchedOpError
from trtcheck.lowering.export import LoweringCache
from trtcheck.names import resolve_ops
from trtcheck.presets import DEFAULT_PRESETS, PRESETS
from trtcheck.values import cloned
from trtcheck.verification.eager_cache import EagerCache

pytestmark = pytest.mark.trtcheck

CASES = [
    pytest.param(name, preset, id=f"{name}-{preset.name}")
    for name in trtcheck_zoo.USER_ZOO
    for preset in PRESETS.values()
    if preset.name not in DEFAULT_PRESETS and preset.settings_for(trtcheck_zoo.get(name).fallback_module) is not None
]


# What a model's presets share, as test_zoo_matrix.py's do (the scheduler keeps one model's tests on one worker): its
# build (seeded, so every preset would build the same model; verify restores what it changes), its lowering per set
# of ops kept whole (lowering's own determinism: the slow tier lowers every zoo model twice) and eager's outputs.
_LOWERED = LoweringCache(twice=False)
_SHARED: dict[str, tuple] = {}


def _shared(entry) -> tuple:
    if entry.name not in _SHARED:
        _SHARED[entry.name] = (*entry.build(), EagerCache())
    model, inputs, eager_cache = _SHARED[entry.name]
    return model, cloned(tuple(inputs)), eager_cache  # a model may write into its inputs (kv_cache_step)


@pytest.mark.parametrize(("name", "preset"), CASES)
def test_user_model_under_every_other_preset(name, preset, trtcheck_config):
    entry = trtcheck_zoo.get(name)
    model, inputs, eager_cache = _shared(entry)
    settings = preset.settings_for(entry.fallback_module)
    verify = functools.partial(
        trtcheck.verify, settings=settings, backend=trtcheck_config.backend, seed=trtcheck_config.seed,
        report_dir=trtcheck_config.report_dir, name=f"{name}-{preset.name}", eager_cache=eager_cache,
    )
    options = entry_options(entry)
    try:
        lowered = _LOWERED.get(entry.name, entry.build, options.get("dynamic_shapes"), resolve_ops(settings.torch_executed_ops))
        check_model(model, inputs, settings, verify, **options, lowered=lowered)
    except UnmatchedOpError as error:  # e.g. torch_add on a model without an add: nothing to force
        pytest.skip(f"{preset.name} does not apply to {name}: {error}")
