"""Fixtures shared by the suites: the partitioning design's example inputs, and a guard on the CPU's float state."""

import pytest
import torch

from trtcheck.benchmarking import denormals_flushed


@pytest.fixture
def seed_inputs():
    torch.manual_seed(0)
    return torch.rand(2, 3) + 0.5, torch.rand(2, 3) + 0.5


@pytest.fixture(autouse=True)
def _denormals_left_as_found():
    """Fail the test that leaves denormals flushed (or unflushed) behind it.

    The flush-to-zero state is per thread and outlives the test: a benchmark helper that set it and never put it back
    made hypothesis refuse to draw floats ("can't represent subnormal floats") in whichever test the same xdist worker
    ran next, so the failure showed up in an unrelated test, depending on the order.
    """
    before = denormals_flushed()
    yield
    after = denormals_flushed()
    torch.set_flush_denormal(before)
    assert after == before, f"this test left denormals {'flushed' if after else 'unflushed'}: wrap the change in " \
                            "trtcheck.benchmarking.flush_denormals(), which restores the previous state"
