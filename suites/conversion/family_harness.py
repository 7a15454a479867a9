"""Shared pieces of the op-family converter tests (padding, scatter, sorting, resize, embedding).

``check`` is the converter harness's ``check`` (convert, run in ONNX Runtime, compare with eager, only
TensorRT-parser ops on the types ``trt_onnx_ops.TENSORRT_ONNX_TYPES`` lists).
``refused`` asserts a node is refused and returns the Refusal's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import trtcheck.conversion as converters
from suites.conversion import converter_harness
from suites.conversion.converter_harness import export_graph

check = converter_harness.check


def node_of(fn: Callable[..., Any], args: Sequence[Any], target: Any) -> torch.fx.Node:
    gm = export_graph(fn, args)
    return next(n for n in gm.graph.nodes if n.target == target)


def refused(fn: Callable[..., Any], args: Sequence[Any], target: Any) -> str:
    """The reason the converter for ``target`` gives for refusing ``fn``'s node (fails if it accepts)."""
    node = node_of(fn, args, target)
    converter = converters.get(target)
    assert converter is not None, f"no converter for {target}"
    judged = converter.judge(node)
    accepted, error, reason = judged.accepted, judged.error, judged.reason
    assert error is None, f"the validator raised {error!r}"
    assert not accepted, f"{target} was accepted"
    return reason or ""


def accepted(fn: Callable[..., Any], args: Sequence[Any], target: Any) -> bool:
    judged = converters.get(target).judge(node_of(fn, args, target))
    accepted, error, _ = judged.accepted, judged.error, judged.reason
    assert error is None, f"the validator raised {error!r}"
    return accepted
