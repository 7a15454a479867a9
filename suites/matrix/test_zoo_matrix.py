"""The verification matrix: every selected zoo model under every selected preset (``pytest --trtcheck``)."""

from __future__ import annotations

import pytest

from suites.matrix.matrix_checks import check_model, entry_options, zoo_tolerances

pytestmark = pytest.mark.trtcheck


def test_zoo_model(trtcheck_model_entry, trtcheck_settings, trtcheck_verify, trtcheck_lowered):
    model, inputs = trtcheck_model_entry.build()
    options = {**zoo_tolerances(trtcheck_model_entry, model, inputs), **entry_options(trtcheck_model_entry), "lowered": trtcheck_lowered}
    check_model(model, inputs, trtcheck_settings, trtcheck_verify, **options)
