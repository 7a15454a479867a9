"""The verification matrix: every selected zoo model under every selected preset (``pytest --trtcheck``)."""

from __future__ import annotations

import pytest

from suites.matrix.matrix_checks import check_model, entry_options, zoo_tolerances
from trtcheck.verification.inputs import cloned

pytestmark = pytest.mark.trtcheck


_LATEST: dict[str, tuple] = {}


def _built(entry) -> tuple:
    """The entry's model and inputs, built once per worker for all its presets (``--trtcheck`` runs a model's presets
    back to back on one worker): a zoo build is seeded, so every preset would build the same model, and verify
    restores every parameter and buffer it changes. The inputs are copied for each preset (a model may write into
    them: kv_cache_step). Only the latest model is kept (vgg11's weights are 507 MiB)."""
    if entry.name not in _LATEST:
        _LATEST.clear()
        _LATEST[entry.name] = entry.build()
    model, inputs = _LATEST[entry.name]
    return model, cloned(tuple(inputs))


def test_zoo_model(trtcheck_model_entry, trtcheck_settings, trtcheck_verify, request):
    if "detection" in trtcheck_model_entry.tags and trtcheck_settings.require_full_compilation:
        pytest.skip("a detector is never one graph (torch.export refuses it; torch.compile breaks it at NMS): "
                    "require_full_compilation cannot hold")
    model, inputs = _built(trtcheck_model_entry)
    options = {**zoo_tolerances(trtcheck_model_entry, model, inputs), **entry_options(trtcheck_model_entry)}
    if "detection" not in trtcheck_model_entry.tags:  # a detector is lowered graph by graph, through torch.compile
        options["lowered"] = request.getfixturevalue("trtcheck_lowered")
    check_model(model, inputs, trtcheck_settings, trtcheck_verify, **options)
