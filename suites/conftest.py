"""Fixtures shared by the suites: the seed's example inputs (partitioning, and the tools that partition)."""

import pytest
import torch


@pytest.fixture
def seed_inputs():
    torch.manual_seed(0)
    return torch.rand(2, 3) + 0.5, torch.rand(2, 3) + 0.5
