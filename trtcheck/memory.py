"""Memory hygiene of one compile: what PyTorch's CPU kernels leave in the process, given back.

Why a module of its own: compile is to take no more memory than ``torch.onnx.export`` plus one ONNX Runtime
session for the whole model (the peer), and shape analysis's run is the first run of PyTorch's CPU kernels in a
fresh process, so what it loads or frees stays: oneDNN's code and JIT kernels, an OpenMP worker's malloc arena,
freed activations in malloc's heap, MKL's GEMM packing buffers. ``lean_run`` runs shape analysis lean and trims
the heap after; ``release_mkl_buffers`` frees MKL's buffers once the engines are built. Both reach into the C
libraries (libc's ``malloc_trim``, libtorch's MKL) through ``ctypes``, and do nothing where those are missing.
The measurements behind both: docs/performance.md#compile-time-and-memory.
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

    Why: what shape analysis's run, the process's first of PyTorch's CPU kernels, loads or frees stays in the process
    (the module's docstring lists what), which would put compile above the peer's memory. Lean, the run keeps less and
    takes longer (docs/performance.md#compile-time-and-memory); the shapes are the same (a kernel choice changes
    values' last bits, never shapes). Both settings are restored also when the run raises; while it runs they hold for
    the whole process, as every ``torch.backends`` flag does. MKL's buffers the run leaves stay until
    ``release_mkl_buffers`` (its docstring says why)."""
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

    MKL keeps the packing buffers of its last GEMMs for the next call (after shape analysis's run, several MiB to
    tens of MiB), which the peer never allocates; MKL allocates them again when a GEMM next needs them. Why after
    the engines, not when the run ends: freed before its engine build, vgg11's compile peaks higher than the
    peer's; freed after it, the models whose peak the early free had lowered stay at or under the peer's. Why the
    early free costs vgg11 is not established (glibc's mmap threshold, the first suspect, ends vgg11's run at the
    same value either way); running shape analysis itself after the engine build was tried and not adopted. The
    figures and the command that reproduces them: docs/performance.md#compile-time-and-memory ("MKL's buffers")."""
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
