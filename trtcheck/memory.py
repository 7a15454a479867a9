"""Memory hygiene of one compile: what PyTorch's CPU kernels leave in the process, given back.

Why a module of its own (issue 25: compile in no more memory than ``torch.onnx.export`` and a session): shape
analysis's run is the first run of PyTorch's CPU kernels in a fresh process, and what it loads or frees stays:
oneDNN's code and JIT kernels, an OpenMP worker's malloc arena, freed activations in malloc's heap, MKL's GEMM
packing buffers. ``lean_run`` runs shape analysis lean and trims the heap after; ``release_mkl_buffers`` frees
MKL's buffers once the engines are built. Both reach into the C libraries (libc's ``malloc_trim``, libtorch's
MKL) through ``ctypes``, and do nothing where those are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def lean_run() -> Iterator[None]:
    """PyTorch on one thread with oneDNN off, for a run that only needs shapes and dtypes; then the heap pages it
    freed given back to the system (glibc's ``malloc_trim(0)``).

    Why (issue 25: compile in no more memory than ``torch.onnx.export`` and a session): in a fresh process shape
    analysis is the first run of PyTorch's CPU kernels, and what that run loads or frees stays in the process:
    oneDNN's code and JIT kernels, an OpenMP worker with its own malloc arena, freed activations kept in malloc's
    heap. RSS above the start after shape analysis, without and with this (``python -m
    suites.benchmarks.bench_compile --models ... --repeat 1``, one round each): convnext_tiny 93 -> 52 MiB, vit_b_16
    92 -> 59, vgg11 72 -> 45. The run is slower (convnext_tiny 0.09 -> 0.5 s, vit_b_16 0.3 -> 0.45 s); the shapes
    are the same (a kernel choice changes values' last bits, never shapes). Both settings are restored also when
    the run raises; while it runs they hold for the whole process, as every ``torch.backends`` flag does. MKL's
    buffers the run leaves stay until ``release_mkl_buffers`` (its docstring says why)."""
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        torch.set_num_threads(1)
        # set_flags, not the ``enabled`` property: that raises once torch.testing's common_utils froze the flags
        # (disable_global_flags); only the flag given is set, and _fp32_precision=None leaves that one alone.
        torch.backends.mkldnn.set_flags(_enabled=False, _fp32_precision=None)
        yield
    finally:
        torch.backends.mkldnn.set_flags(_enabled=onednn, _fp32_precision=None)
        torch.set_num_threads(threads)
        _trim_heap()


def release_mkl_buffers() -> None:
    """MKL's cached buffers freed (``mkl_free_buffers``), then glibc's ``malloc_trim(0)`` (where either is missing:
    nothing). ``compile`` calls this once its engines are built, not when shape analysis's run ends.

    MKL keeps the packing buffers of its last GEMMs for the next call (after shape analysis's run, ``mkl_serv_mem_stat``:
    vgg11 9.0 MiB, resnet50 5.7, convnext_tiny 29.3 in 5 buffers, bert_base 14.4), which the peer never allocates; MKL
    allocates them again when a GEMM next needs them. Why after the engines: vgg11's compile peaks 21-32 MiB higher
    when they are freed before its engine build (single processes, MiB, freed before / not, the heap trimmed when the
    run ends: 935, 935 / 912, 903; not trimmed: 928, 935 / 907, 913; the peer 909-920), which decided issue 25's
    memory target for vgg11. What it costs the others, medians of five rounds,
    freed when the run ended / after the build (``python -m suites.benchmarks.bench_compile --models resnet50
    convnext_tiny inception_v3 bert_base --repeat 5``): resnet50 291 / 305 MiB (the peer 305), convnext_tiny 166 / 180
    (181), inception_v3 263 / 269 (270-284), bert_base 406 / 406 (405-406). Why the early free costs vgg11 is not
    established: glibc's mmap threshold, the first suspect, is ~27.9 MiB after vgg11's run with the free and without
    it (the run's own im2col buffers raised it), found by probing which malloc size gets mmapped. Running shape
    analysis itself after the engine build was tried too: vgg11 894, but its run then adds its activations to the
    session's kept memory (one round: efficientnet_b0 105 against the peer's 99, densenet121 1.01, convnext_tiny 1.02;
    bert_base 417 against 405 over three)."""
    if _MKL_FREE_BUFFERS is not None:
        _MKL_FREE_BUFFERS()
    _trim_heap()


def _trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: the heap pages free chunks occupy go back to the system (elsewhere: nothing)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # this process's own C library, where it is glibc
    except (OSError, AttributeError):
        return None


def _mkl_free_buffers() -> Any:
    """``mkl_free_buffers`` of the MKL linked into libtorch (exported under its service name,
    ``mkl_serv_free_buffers``), or None: a torch without MKL, or not on Linux."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")).mkl_serv_free_buffers
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()
_MKL_FREE_BUFFERS = _mkl_free_buffers()
