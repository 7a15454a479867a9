"""What a benchmark of a stitched module records next to its timings (pytest-benchmark's ``extra_info``).

The report (``trtcheck report``) reads these keys back from pytest-benchmark's JSON, so this module is
the one place that defines them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import torch
import torch.fx

from trtcheck.partitioning.partition import boundary_traffic
from trtcheck.partitioning.reasons import Target

SCHEMA_VERSION = 1
VARIANTS = ("eager", "stitched")


def denormals_flushed() -> bool:
    """Whether float32 denormals are flushed to zero on this thread right now.

    torch has a setter (``torch.set_flush_denormal``, whose return value says whether the CPU *supports*
    flushing, not what the state was) and no getter (no ``torch._C._get_flush_denormal`` either, as of
    torch 2.x). So this asks the CPU: 1e-30 * 1e-10 is a float32 denormal (about 1e-40), which comes out
    as exactly 0 when flush-to-zero is on. The flag lives in the calling thread's floating-point control
    register (MXCSR on x86), the one ``set_flush_denormal`` writes, and a one-element CPU op runs on the
    calling thread.
    """
    probe = torch.tensor([1e-30], dtype=torch.float32)
    return bool((probe * 1e-10).item() == 0.0)


@contextlib.contextmanager
def flush_denormals() -> Iterator[bool]:
    """Flush denormals inside the block, then restore whatever the state was before (not just "off").

    Yields whether denormals are actually flushed inside the block (False on a CPU without support), which
    is what ``extra_info(..., denormals_flushed=...)`` should record. Build engines before entering: creating an
    ONNX Runtime session resets the calling thread's flag (onnxruntime 1.32, ``set_denormal_as_zero`` off by default).
    """
    previous = denormals_flushed()
    torch.set_flush_denormal(True)
    try:
        yield denormals_flushed()
    finally:
        torch.set_flush_denormal(previous)


def preset_label(preset: str, precision: str) -> str:
    """How reports and benchmark groups name a preset at a precision (``verification.judge.judged_precision``'s names):
    the preset itself at fp32, ``{preset}-fp16`` / ``{preset}-bf16`` below, ``{preset}-tf32`` for ``Settings.tf32``
    (kept as it is when it already ends so: a caller may have named it so itself)."""
    suffix = f"-{precision}"
    return preset if precision == "fp32" or preset.endswith(suffix) else preset + suffix


def extra_info(
    model: str,
    preset: str,
    variant: str,
    backend: str,
    stitched: torch.fx.GraphModule | None,
    equivalence: dict[str, Any] | None = None,
    denormals_flushed: bool = False,
    profile: dict[str, Any] | None = None,
    precision: str = "fp32",
) -> dict[str, Any]:
    """The ``extra_info`` of one benchmark; ``stitched`` also describes the eager variant of its group.

    ``profile`` is where a stitched call spends its time, ``trtcheck.profile(stitched, inputs).to_dict()``:
    ``total_s``, ``engine_s``, ``torch_s``, ``boundary_s`` (seconds per call), ``boundaries``,
    ``per_boundary_s`` and ``segments``. Recorded under ``"profile"`` when given (the stitched variant);
    files written before it existed have no such key, and the report shows ``n/a`` for them. ``precision`` is
    the compiled module's precision (``judged_precision``: ``Settings.precision``, or "tf32"; files without it were
    fp32: the report reads them so).
    """
    info: dict[str, Any] = {
        "trtcheck_schema": SCHEMA_VERSION,
        "model": model,
        "preset": preset,
        "variant": variant,
        "backend": backend,
        "precision": precision,
        "denormals_flushed": denormals_flushed,
    }
    if stitched is not None:
        partition = stitched.partition
        boundaries, boundary_bytes = boundary_traffic(partition.segments)
        info.update(
            segments={"tensorrt": len(partition.segments_of(Target.TENSORRT)), "torch": len(partition.segments_of(Target.TORCH))},
            boundaries=boundaries,
            boundary_bytes=boundary_bytes,
            compile_times=asdict(stitched.compile_times),
            fallbacks=len(partition.fallbacks),
        )
    if equivalence is not None:
        info["equivalence"] = equivalence
    if profile is not None:
        info["profile"] = dict(profile)
    return info
