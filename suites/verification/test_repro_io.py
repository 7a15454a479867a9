"""Repro files are written atomically, and an unwritable report directory warns instead of failing the check."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import trtcheck
from trtcheck.atomic import atomic_write
from trtcheck.errors import ReproWriteWarning
from trtcheck.lowering.export import lower
from trtcheck.verification import repro
from trtcheck.verification.repro import write_repro

FILES = {"converters.json", "graph.py", "model.pt", "inputs.pt", "settings.json", "failure.txt", "repro.py", "verify.json"}


class Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


@pytest.fixture
def case():
    inputs = (torch.randn(2, 3),)
    return lower(Tiny(), inputs), inputs, trtcheck.Settings(min_block_size=1)


def test_an_uncreatable_report_dir_warns_and_returns_none(case, tmp_path):
    gm, inputs, settings = case
    blocker = tmp_path / "file"
    blocker.write_text("a regular file: nothing can be created under it, not even by root")
    with pytest.warns(ReproWriteWarning, match=r"could not write the repro to .*file/sub/case.*result is unaffected"):
        assert write_repro(blocker / "sub", gm, inputs, settings, "onnxruntime", "boom", name="case") is None
    assert blocker.read_text().startswith("a regular file")


def test_a_writable_report_dir_writes_every_file_and_no_temporary(case, tmp_path):
    gm, inputs, settings = case
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproWriteWarning)
        folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "boom", name="case")
    assert folder == tmp_path / "case"
    assert {p.name for p in folder.iterdir()} == FILES


def test_a_write_failing_midway_keeps_the_old_file_and_leaves_no_partial_one(case, tmp_path, monkeypatch):
    gm, inputs, settings = case
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "first failure", name="case")
    old_inputs = (folder / "inputs.pt").read_bytes()
    real_save = torch.save

    def save_then_fail(obj, file, *args, **kwargs):
        real_save(obj, file, *args, **kwargs)  # the bytes are written: then the disk "fills up"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(repro.torch, "save", save_then_fail)
    with pytest.warns(ReproWriteWarning, match="No space left on device"):
        assert write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "second failure", name="case") is None
    assert (folder / "inputs.pt").read_bytes() == old_inputs  # never half of the new model.pt/inputs.pt
    assert {p.name for p in folder.iterdir()} == FILES  # no temporary file left behind


def test_atomic_write_removes_its_temporary_file_when_the_writer_raises(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old report")

    def half(file):
        file.write(b"new rep")
        raise RuntimeError("renderer crashed")

    with pytest.raises(RuntimeError, match="renderer crashed"):
        atomic_write(target, half)
    assert target.read_text() == "old report"
    assert os.listdir(tmp_path) == ["report.md"]


def test_atomic_write_makes_a_normal_file(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    path = atomic_write(tmp_path / "a.txt", "text")
    assert path.read_text() == "text"
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
