"""PyTorch's thread count while a compiled module runs (``torch_threads``).

After every parallel op PyTorch's OpenMP workers spin for about 10 ms, so an engine that runs right after
a Torch segment shares the cores with a spinning thread. ``auto_torch_threads`` decides, per compiled
module, whether its Torch segments run on one thread (measured in ``suites/benchmarks/bench_segments.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch.utils.flop_counter import flop_registry

from trtcheck.errors import SettingsError
from trtcheck.runtime.stitch import EngineModule

TORCH_THREADS_AUTO = "auto"


def check_torch_threads(value: Any) -> None:
    """Refuse a ``torch_threads`` that is not ``"auto"``, None or a positive int, naming the choices."""
    if value is None or value == TORCH_THREADS_AUTO:
        return
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return
    raise SettingsError(
        f"torch_threads must be 'auto' (one PyTorch thread while engines run, when PyTorch's segments are only "
        f"memory-bound ops), None (leave torch.get_num_threads() as it is) or a positive int, got {value!r}"
    )


def is_compute_bound(node: torch.fx.Node) -> bool:
    """True for ops whose time grows with arithmetic, not memory traffic: those PyTorch's flop counter
    counts (``mm``, ``addmm``, ``bmm``, ``convolution``, attention), which gain from every core."""
    return node.op == "call_function" and getattr(node.target, "overloadpacket", None) in flop_registry


def auto_torch_threads(stitched: torch.fx.GraphModule) -> int | None:
    """PyTorch's thread count for calls of ``stitched`` under ``torch_threads="auto"``: 1 when it runs an
    engine and every op it runs in PyTorch (control-flow branches included) is memory-bound, else None.

    Why (docs/performance.md, section "ONNX Runtime engines: threads, spinning and the call path"; figures from
    ``suites/benchmarks/bench_segments.py``): after every parallel op PyTorch's
    OpenMP workers spin for about 10 ms (libgomp's default wait policy, read once at start-up), so the
    engine that follows a Torch segment shares the cores with a spinning thread. resnet18 with relu forced
    to PyTorch (18 engines) ran at 1.2-1.3x eager's time; with PyTorch on one thread for its segments, at
    0.8x. A memory-bound op loses little on one thread (a relu of 1x64x112x112: 87 against 76 us on two);
    a convolution or matmul in PyTorch would lose up to half, so a module with one keeps PyTorch's threads.
    """
    modules = list(stitched.modules())
    if not any(isinstance(module, EngineModule) for module in modules):
        return None
    for module in modules:
        if isinstance(module, torch.fx.GraphModule) and any(is_compute_bound(node) for node in module.graph.nodes):
            return None
    return 1
