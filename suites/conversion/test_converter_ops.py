"""Each converter against PyTorch: convert, run in ONNX Runtime (CPU), compare with eager."""

from __future__ import annotations

import pytest

from suites.conversion.converter_cases import CASES
from suites.conversion.converter_harness import check


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_converter_matches_eager(case) -> None:
    check(case.fn, case.inputs(), targets=case.targets, decompose=case.decompose, rtol=case.rtol, atol=case.atol)
