"""A downstream user's project, for the tests that run pytest in it as the user would: a subprocess in a temporary
folder, with none of this session's paths or options, and the one wrong converter the failure tests plant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WRONG_CONVERTER_TEST = '''
import torch
from torch import nn
from trtcheck import conversion as converters


def _relu_as_negation(ctx, node):  # wrong on purpose: the engine computes -x where eager computes relu(x)
    return ctx.add("Neg", [ctx.name(node.args[0])])


def test_wrong(trtcheck_verify):
    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(_relu_as_negation)
        torch.manual_seed(0)
        trtcheck_verify(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval(), (torch.randn(2, 8),))
'''

ONNXRUNTIME = ("--trtcheck", "--trtcheck-backend", "onnxruntime")


def user_env() -> dict[str, str]:
    """The environment a user's pytest runs in: none of this session's paths, options, xdist worker or trace log."""
    hidden = ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "TORCH_TRACE")
    return {k: v for k, v in os.environ.items() if k not in hidden}


def run_python(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``project``, as the user runs it."""
    return subprocess.run([sys.executable, *args], cwd=project, env=user_env(), capture_output=True, text=True,
                          timeout=600)


def run_pytest(project: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``pytest OPTIONS`` in ``project``, without the cache or pytest-randomly (a stable order to assert on)."""
    return run_python(project, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *options)
