"""Every kind of repro folder trtcheck writes reproduces on its own (issue 43): ``verify``'s (``report_dir``) and each
culprit folder of ``reduce``, of a static and of a dynamic-shape model, run as ``python repro.py`` in a fresh process.

The user's converter lives in the user's own file, as it would: wrong (``Neg`` for relu), every folder FAILs in the new
process, which registers it again from ``converters.json`` and keeps the model's Dims; the user fixes the file, and the
same folders PASS. A folder that lost the converter would PASS while it is wrong; one that lost the Dims or its
inputs' metadata would crash or compare at one size (issue 43, items 8 and 9)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import trtcheck
from trtcheck import conversion as converters
from trtcheck.verification.reduce import reduce_model

CONVERTERS = '''
def relu_converter(ctx, node):  # the user's own relu converter, in the user's file
    return ctx.add("{op}", [ctx.name(node.args[0])])
'''


def _fresh(folder: pathlib.Path) -> subprocess.CompletedProcess:
    """``python repro.py`` in a new process with this checkout's trtcheck on the path, run from elsewhere."""
    root = str(pathlib.Path(trtcheck.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, cwd=folder.parent,
                          env=env, timeout=300, check=False)


def _failed(kind: str, done: subprocess.CompletedProcess) -> bool:
    """What each kind prints when its failure is present: verify's repro raises the failure (a ``VerificationError``
    with the report, as the failing test did); a culprit's prints its comparison, then FAIL."""
    if kind == "verify":
        return "VerificationError" in done.stderr and "trtcheck verification of mlp: FAILED" in done.stderr
    return done.stdout.strip().endswith("FAIL")


def _model() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval(), (torch.randn(4, 8),)


DYNAMIC = {"static": None, "dynamic": ({0: torch.export.Dim("batch", min=2, max=16)},)}


@pytest.mark.slow  # four runs in fresh processes
@pytest.mark.parametrize("shapes", list(DYNAMIC))
def test_each_kind_of_repro_folder_fails_in_a_fresh_process_until_the_user_fixes_the_converter(tmp_path, shapes):
    source = tmp_path / "users_converters.py"
    source.write_text(CONVERTERS.format(op="Neg"))  # wrong on purpose: -x for relu(x)
    spec = importlib.util.spec_from_file_location("users_converters", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = _model()
    settings = trtcheck.Settings(min_block_size=1)
    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(module.relu_converter)
        with pytest.raises(trtcheck.VerificationError) as failed:
            trtcheck.verify(model, inputs, settings, backend="onnxruntime", dynamic_shapes=DYNAMIC[shapes],
                            report_dir=tmp_path / "verify", name="mlp", localize_budget=0)
        reduction = reduce_model(model, inputs, settings, backend="onnxruntime", dynamic_shapes=DYNAMIC[shapes],
                                 out_dir=tmp_path / "reduced")
    report = failed.value.report
    assert report.repro is not None, str(report)
    assert [culprit.nodes for culprit in reduction.culprits] == [["relu"]], str(reduction)
    folders = {"verify": report.repro, "culprit": reduction.culprits[0].repro}
    for kind, folder in folders.items():
        done = _fresh(folder)
        assert done.returncode == 1 and _failed(kind, done), (kind, done.stdout + done.stderr[-3000:])
        assert "registered users_converters.relu_converter for aten.relu.default" in done.stdout, (kind, done.stdout)
        if shapes == "dynamic" and kind == "verify":
            assert "batch" in (folder / "verify.json").read_text(), kind  # the Dims travel with the folder
    source.write_text(CONVERTERS.format(op="Relu"))  # the user fixes the converter
    for kind, folder in folders.items():
        done = _fresh(folder)
        assert done.returncode == 0 and not _failed(kind, done), (kind, done.stdout + done.stderr[-3000:])
        assert done.stdout.strip().endswith("PASS" if kind == "culprit" else "the failure did not reproduce"), (kind, done.stdout)
