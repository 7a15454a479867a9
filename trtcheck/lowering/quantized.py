"""ModelOpt's quantized modules, exported as Torch-TensorRT exports them, and their Q/DQ ops made trtcheck's own.

NVIDIA ModelOpt (``mtq.quantize``) puts a ``TensorQuantizer`` before each quantized input and weight. Inside
ModelOpt's ``export_torch_mode()`` a quantizer exports as one ``torch.ops.tensorrt.quantize_op`` node, the op
Torch-TensorRT converts to TensorRT's Q/DQ layers; so trtcheck exports a model holding quantizers inside that mode,
as Torch-TensorRT's tracer does. On a CPU, ModelOpt's INT8 quantizers take a Python path instead of that op, and
torch.export refuses it (a data-dependent branch on the amax); for the export's duration, every enabled static
integer quantizer is routed through ModelOpt's public backend hook (``register_quant_backend``) to the same op the
CUDA path records, and put back afterwards.

Lowering then replaces ModelOpt's ops by ``trtcheck::quantize_op`` (``trtcheck.qdq``: the same schema, TensorRT's
arithmetic on every device and in float64) through the decomposition table, so the lowered graph runs without
CUDA and keeps each node's name, module path (``conv2.input_quantizer``) and source line.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trtcheck import qdq
from trtcheck.errors import LoweringError

_BACKEND = "trtcheck_export"
_QUANTIZER_CLASSES = ("TensorQuantizer", "SequentialQuantizer")


def quantizers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(module path, quantizer)`` of every enabled ModelOpt quantizer in ``model``, found by class, so that a
    model without any costs no ModelOpt import."""
    return [
        (name, module) for name, module in model.named_modules()
        if type(module).__name__ in _QUANTIZER_CLASSES and type(module).__module__.startswith("modelopt.")
        and getattr(module, "is_enabled", True)
    ]


def _routed(quantizer: torch.nn.Module) -> bool:
    """A static INT8 quantizer (per tensor or per channel, no bias calibration, which the op has no place for): the
    one kind ModelOpt's CPU path cannot export. Others export as ModelOpt exports them."""
    return (
        type(quantizer).__name__ == "TensorQuantizer" and getattr(quantizer, "num_bits", None) == 8
        and getattr(quantizer, "block_sizes", None) is None and getattr(quantizer, "backend", None) is None
        and getattr(quantizer, "_amax", None) is not None and getattr(quantizer, "_bias_calibrator", None) is None
    )


def _as_tensorrt_op(inputs: torch.Tensor, quantizer: Any) -> torch.Tensor:
    """What ModelOpt's CUDA path records for an integer quantizer: ``tensorrt.quantize_op`` of its calibrated amax."""
    return torch.ops.tensorrt.quantize_op(
        inputs, quantizer.amax.detach(), quantizer.num_bits, 0, bool(quantizer.unsigned), bool(quantizer.narrow_range)
    )


@contextlib.contextmanager
def quantized_export(model: torch.nn.Module) -> Iterator[None]:
    """Export ``model`` inside this block as Torch-TensorRT would: nothing changes for a model without ModelOpt
    quantizers; with them, ModelOpt's export mode is on and its integer quantizers are routed to
    ``tensorrt.quantize_op`` (module docstring), each quantizer's ``backend`` put back however the block ends."""
    found = quantizers(model)
    if not found:
        yield
        return
    # Deferred: ModelOpt is an optional dependency ([quant]), and a model holding its quantizers has imported it.
    utils = importlib.import_module("modelopt.torch.quantization.utils")
    hooks = importlib.import_module("modelopt.torch.quantization.nn.modules.tensor_quantizer")
    routed = [quantizer for _, quantizer in found if _routed(quantizer)]
    hooks.register_quant_backend(_BACKEND, _as_tensorrt_op)
    try:
        for quantizer in routed:
            quantizer.backend = _BACKEND
        with utils.export_torch_mode():
            yield
    finally:
        for quantizer in routed:
            quantizer.backend = None
        hooks.unregister_quant_backend(_BACKEND)


def register_modelopt_ops(path: str | os.PathLike) -> None:
    """Register ModelOpt's ``tensorrt::`` ops (by importing its quantization package) when the ``.pt2`` at ``path``
    calls them, so that ``torch.export.load`` can resolve them; a ``LoweringError`` naming the fix where ModelOpt is
    not installed. A file that is no zip archive is left to ``torch.export.load`` to refuse."""
    try:
        with zipfile.ZipFile(path) as archive:
            calls = any(b"tensorrt.quantize_op" in archive.read(name) or b"tensorrt.dynamic_block_quantize_op" in archive.read(name)
                        for name in archive.namelist() if name.endswith(".json"))
    except (OSError, zipfile.BadZipFile):
        return
    if not calls:
        return
    try:
        importlib.import_module("modelopt.torch.quantization")  # registers tensorrt::quantize_op and its siblings
    except ImportError as error:
        raise LoweringError(
            f"{os.fspath(path)} holds NVIDIA ModelOpt's quantize ops (tensorrt.quantize_op), which only ModelOpt defines "
            f"({type(error).__name__}: {error}). Fix: pip install 'trtcheck[quant]' (nvidia-modelopt), then load it again"
        ) from error


def _trtcheck_quantize(input: torch.Tensor, amax: torch.Tensor, num_bits: int, exponent_bits: int, unsigned: bool = False,
                       narrow_range: bool = False, *_: Any) -> torch.Tensor:
    """``tensorrt.quantize_op`` as trtcheck's op (later ModelOpt versions append arguments Torch-TensorRT ignores)."""
    return qdq.quantize_op(input, amax, num_bits, exponent_bits, unsigned, narrow_range)


def quantize_decompositions() -> dict[Any, Callable[..., Any]]:
    """Decomposition-table entries that make ModelOpt's ``tensorrt.quantize_op`` trtcheck's ``quantize_op``; none
    where no such op is registered (ModelOpt not imported)."""
    try:
        op = torch.ops.tensorrt.quantize_op.default
    except (AttributeError, RuntimeError):
        return {}
    return {op: _trtcheck_quantize}


def is_quantize(node: torch.fx.Node) -> bool:
    """A quantizer of a lowered graph: a ``trtcheck.quantize_op`` call."""
    return node.op == "call_function" and node.target is torch.ops.trtcheck.quantize_op.default


__all__ = ["is_quantize", "quantize_decompositions", "quantized_export", "quantizers", "register_modelopt_ops"]
