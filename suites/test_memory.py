"""Memory hygiene (``trtcheck.memory``): shape analysis's run is lean and gives the heap back, and compile frees
MKL's buffers once its engines are built, with the user's thread and oneDNN settings restored whatever happens."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
import torch
import torch.fx

import trtcheck
import trtcheck.compiler.pipeline as compile_module
import trtcheck.memory
from trtcheck.memory import lean_run
from trtcheck.shapes import observe

aten = torch.ops.aten


_SEEN: list[tuple[int, bool]] = []


def _settings_seen_by_the_run() -> tuple[int, bool]:
    _SEEN.append((torch.get_num_threads(), torch._C._get_mkldnn_enabled()))
    return _SEEN[-1]


def _raises(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("the model's own error")


@pytest.mark.parametrize("fails", [False, True], ids=["runs", "raises"])
def test_observe_runs_on_one_thread_without_onednn_and_restores_both(monkeypatch, fails):
    """``lean_run``: what the shape-analysis run leaves in the process (issue 25's memory); the user's settings come
    back whatever the run does."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    seen = graph.call_function(_settings_seen_by_the_run, ())
    relu = graph.call_function(aten.relu.default, (x,))
    graph.output((graph.call_function(_raises, (relu,)) if fails else relu, seen))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    calls = []
    monkeypatch.setattr(trtcheck.memory, "_MALLOC_TRIM", lambda pad: calls.append("trim"))
    threads = max(torch.get_num_threads(), 2)
    torch.set_num_threads(threads)
    try:
        with lean_run():
            assert _settings_seen_by_the_run() == (1, False)
        _SEEN.clear()
        observation = observe(gm, [torch.randn(3)])
        assert (observation.error is not None) == fails and _SEEN == [(1, False)]
        assert _settings_seen_by_the_run() == (threads, True) and calls == ["trim", "trim"]
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.set_flags(_enabled=True, _fp32_precision=None)


@pytest.mark.slow
def test_shape_analysis_runs_where_torch_testing_froze_the_backend_flags():
    """``torch.testing._internal.common_utils`` calls ``torch.backends.disable_global_flags()`` on import (the OpInfo
    tests import it): setting ``torch.backends.mkldnn.enabled`` then raises, which failed every later compile in
    that pytest worker. A fresh interpreter: the freeze cannot be undone."""
    script = (
        "import torch, torch.testing._internal.common_utils, trtcheck\n"
        "assert torch.backends.flags_frozen()\n"
        "compiled = trtcheck.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),),"
        " trtcheck.Settings(min_block_size=1), backend='onnxruntime')\n"
        "assert torch._C._get_mkldnn_enabled()\n"
        "print('compiled', len(compiled.partition.segments))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "compiled 1" in done.stdout, done.stderr[-2000:]


@pytest.mark.skipif(trtcheck.memory._MKL_FREE_BUFFERS is None, reason="this torch has no MKL (or is not on Linux)")
def test_compile_frees_the_mkl_buffers_of_shape_analysis_once_its_engines_are_built(monkeypatch):
    """MKL caches its GEMMs' packing buffers; compile frees them, but only after the engine build
    (``release_mkl_buffers`` says why and how much)."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    lib.mkl_serv_mem_stat.restype = ctypes.c_int64

    def mkl_bytes() -> int:
        return lib.mkl_serv_mem_stat(ctypes.byref(ctypes.c_int(0)))

    seen = []
    build_engines, release = compile_module.build_engines, compile_module.release_mkl_buffers
    monkeypatch.setattr(compile_module, "build_engines", lambda *a, **k: (seen.append(("build", mkl_bytes())), build_engines(*a, **k))[1])
    monkeypatch.setattr(compile_module, "release_mkl_buffers", lambda: (seen.append(("release", mkl_bytes())), release())[1])
    release()  # what earlier tests in this process left
    assert mkl_bytes() == 0
    model = torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.ReLU())
    compiled = trtcheck.compile(model, (torch.randn(256, 768),), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert len(compiled.engines) == 1 and compiled.compile_times.shape_analysis > 0
    assert [stage for stage, _ in seen] == ["build", "release"]
    assert seen[0][1] > 0, "shape analysis's GEMM left no MKL buffer (or they were freed before the engine build)"
    assert mkl_bytes() == 0
