"""The benchmarks flush denormals while timing and then restore the previous state, not "off"."""

from __future__ import annotations

import pytest
import torch

from trtcheck.benchmarking import denormals_flushed, flush_denormals

SUPPORTED = torch.set_flush_denormal(False)  # also the state every test here starts from


@pytest.fixture(autouse=True)
def restore():
    before = denormals_flushed()
    yield
    torch.set_flush_denormal(before)


def test_the_probe_reads_the_state_torch_sets():
    torch.set_flush_denormal(False)
    assert denormals_flushed() is False
    if SUPPORTED:
        torch.set_flush_denormal(True)
        assert denormals_flushed() is True


@pytest.mark.parametrize("before", [False, True])
def test_the_previous_state_is_restored(before):
    if before and not SUPPORTED:
        pytest.skip("this CPU cannot flush denormals")
    torch.set_flush_denormal(before)
    with flush_denormals() as flushed:
        assert flushed is SUPPORTED and denormals_flushed() is SUPPORTED
    assert denormals_flushed() is before


def test_the_previous_state_is_restored_when_the_block_raises():
    torch.set_flush_denormal(False)
    with pytest.raises(RuntimeError), flush_denormals():
        raise RuntimeError("benchmark failed")
    assert denormals_flushed() is False
