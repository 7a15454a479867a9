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
from trtcheck.presets import DEFAULT_PRESETS, PRESETS

pytestmark = pytest.mark.trtcheck

CASES = [
    pytest.param(name, preset, id=f"{name}-{preset.name}")
    for name in trtcheck_zoo.USER_ZOO
    for preset in PRESETS.values()
    if preset.name not in DEFAULT_PRESETS and preset.settings_for(trtcheck_zoo.get(name).fallback_module) is not None
]


@pytest.mark.parametrize(("name", "preset"), CASES)
def test_user_model_under_every_other_preset(name, preset, trtcheck_config):
    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    settings = preset.settings_for(entry.fallback_module)
    verify = functools.partial(
        trtcheck.verify, settings=settings, backend=trtcheck_config.backend, seed=trtcheck_config.seed,
        report_dir=trtcheck_config.report_dir, name=f"{name}-{preset.name}",
    )
    try:
        check_model(model, inputs, settings, verify, **entry_options(entry))
    except UnmatchedOpError as error:  # e.g. torch_add on a model without an add: nothing to force
        pytest.skip(f"{preset.name} does not apply to {name}: {error}")
