"""``verify``'s options are one typed, frozen ``VerifyRequest``, checked in one place before anything runs.

A bad keyword value is a ``ValueError`` or ``TypeError`` that names the keyword, the value and the fix, raised before
the model is lowered, compiled or called: a typo found after a minute of compiling (or, for ``localize_budget``, only
once a comparison failed) costs the minute and hides the failure. The keyword API is ``verify``'s as it was.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib

import numpy as np
import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.verification.request import VerifyRequest

ONE = trtcheck.Settings(min_block_size=1)


class Watched(nn.Module):
    """Counts its forward calls: lowering (torch.export runs forward) and eager both call it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.relu(self.lin(x))


BAD = [
    ({"num_inputs": 0}, ValueError, r"num_inputs=0\): .*at least 1"),
    ({"num_inputs": 2.5}, TypeError, r"num_inputs=2\.5\): .*an int"),
    ({"num_inputs": True}, TypeError, r"num_inputs=True\): .*an int"),
    ({"rtol": -1e-3}, ValueError, r"rtol=-0\.001\): .*>= 0"),
    ({"rtol": "1e-3"}, TypeError, r"rtol='1e-3'\): .*a number, or None"),
    ({"atol": float("nan")}, ValueError, r"atol=nan\): .*>= 0"),
    ({"localize_budget": -1}, ValueError, r"localize_budget=-1\): .*0 turns localization off"),
    ({"localize_budget": None}, TypeError, r"localize_budget=None\): .*seconds"),
    ({"seed": "0"}, TypeError, r"seed='0'\): .*an int"),
    ({"reference": "yes"}, TypeError, r"reference='yes'\): .*True or False"),
    ({"allow_fallbacks": 1}, TypeError, r"allow_fallbacks=1\): .*True or False"),
    ({"report_dir": 3}, TypeError, r"report_dir=3\): .*a directory path"),
    ({"name": 3}, TypeError, r"name=3\): .*a str"),
    ({"eager_cache": {}}, TypeError, r"eager_cache=\{\}\): .*EagerCache"),
    ({"lowered": nn.Identity()}, TypeError, r"lowered=Identity\(\)\): .*torch\.fx\.GraphModule.*trtcheck\.lower"),
    ({"support": "aten.relu.default"}, TypeError, r"support must be None"),
    ({"backend": 3}, TypeError, r"backend=3\): .*onnxruntime"),
    ({"backend": "cudnn"}, trtcheck.BackendError, r"cudnn"),
    ({"inputs": torch.randn(2, 4)}, trtcheck.InputDomainError, r"inputs must be a list of input sets"),
    ({"settings": {"min_block_size": 1}}, trtcheck.SettingsError, r"Settings"),
    # issue 43, item 13: each raised a raw torch or Python error from deep inside, after the whole compile
    ({"rtol": -1}, ValueError, r"rtol=-1\): .*>= 0"),
    ({"rtol": float("nan")}, ValueError, r"rtol=nan\): .*>= 0"),
    ({"seed": "a"}, TypeError, r"seed='a'\): .*an int"),
    ({"num_inputs": 2.5}, TypeError, r"num_inputs=2\.5\): .*an int"),
    # and the two the request did not check: an infinite tolerance passes any finite output, and a seed
    # torch.Generator cannot take ("Overflow when unpacking long long" after the compile)
    ({"rtol": float("inf")}, ValueError, r"rtol=inf\): .*finite"),
    ({"atol": float("inf")}, ValueError, r"atol=inf\): .*finite"),
    ({"seed": 2**64}, ValueError, r"seed=18446744073709551616\): .*-2\*\*63"),
    ({"seed": -(2**63) - 1}, ValueError, r"seed=-9223372036854775809\): .*2\*\*64 - 1"),
]


def _id(keyword: dict) -> str:
    ((name, value),) = keyword.items()
    return f"{name}={type(value).__name__ if isinstance(value, (torch.Tensor, nn.Module)) else repr(value)}"


@pytest.mark.parametrize(("keyword", "error", "message"), BAD, ids=[_id(keyword) for keyword, _, _ in BAD])
def test_a_bad_option_fails_naming_it_before_the_model_runs(keyword, error, message):
    model = Watched()
    options = {"settings": ONE, "backend": "onnxruntime", **keyword}
    with pytest.raises(error, match=message):
        trtcheck.verify(model, (torch.randn(2, 4),), **options)
    assert model.calls == 0, "the model ran (lowered or called) before the bad option was refused"


def test_the_request_is_checked_however_it_is_made():
    """Built directly, or by ``dataclasses.replace``: the one check runs every time; and it cannot be changed after."""
    with pytest.raises(ValueError, match=r"num_inputs=-2\): "):
        VerifyRequest(num_inputs=-2)
    request = VerifyRequest(backend="onnxruntime")
    with pytest.raises(ValueError, match=r"rtol=-1\): "):
        dataclasses.replace(request, rtol=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 3  # type: ignore[misc]
    assert request.settings == trtcheck.Settings() and request.resolved_backend == "onnxruntime"


def test_verify_keeps_every_keyword_and_its_default():
    """The request holds verify's options (everything but the model and its example inputs), with verify's defaults:
    the keyword API, positions included, is what it was."""
    parameters = inspect.signature(trtcheck.verify).parameters
    fields = {field.name: field.default for field in dataclasses.fields(VerifyRequest) if field.init}
    assert list(parameters) == [
        "model", "example_inputs", "settings", "backend", "rtol", "atol", "num_inputs", "inputs", "example_kwargs",
        "allow_fallbacks", "lowered", "support", "seed", "report_dir", "name", "dynamic_shapes", "reference",
        "localize_budget", "eager_cache", "frontend", "dynamic",
    ]
    assert set(parameters) - set(fields) == {"model", "example_inputs", "example_kwargs"}
    assert {name: parameters[name].default for name in fields} == fields
    positional = [p.name for p in parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == ["model", "example_inputs", "settings", "backend", "rtol", "atol", "num_inputs"]


def test_values_verify_always_took_still_pass(tmp_path):
    """A numpy scalar tolerance, an int tolerance, a path object, positional options: what callers passed before the
    request existed still verifies; and a numpy integer seed, which ``torch.Generator`` refused, now does too."""
    report = trtcheck.verify(
        Watched().eval(), (torch.randn(2, 4),), ONE, "onnxruntime", np.float32(1e-3), 0, 2,
        seed=np.int64(1), report_dir=pathlib.Path(tmp_path), localize_budget=0, allow_fallbacks=False,
    )
    assert report.passed and len(report.comparisons) == 3
