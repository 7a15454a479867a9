"""Fixtures of the runtime suites."""

from __future__ import annotations

import pytest

from trtcheck.runtime.stitch import EngineModule


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The segment index of every engine call (``EngineModule.forward``), in order: a compiled module running its
    model in PyTorch alone, or a call its input check refuses, makes none."""
    calls: list[int] = []
    forward = EngineModule.forward

    def counting(self, *tensors):
        calls.append(self.segment_index)
        return forward(self, *tensors)

    monkeypatch.setattr(EngineModule, "forward", counting)
    return calls
