"""ModelOpt's quantized modules, exported as Torch-TensorRT exports them, and their Q/DQ ops made trtcheck's own.

NVIDIA ModelOpt (``mtq.quantize``) puts a ``TensorQuantizer`` before each quantized input and weight. Inside
ModelOpt's ``export_torch_mode()`` a quantizer exports as one ``torch.ops.tensorrt.quantize_op`` node, the op
Torch-TensorRT converts to TensorRT's Q/DQ layers; so trtcheck exports a model holding quantizers inside that mode,
as Torch-TensorRT's tracer does. On a CPU, ModelOpt's INT8 quantizers take a Python path instead of that op, and
torch.export refuses it (a data-dependent branch on the amax); for the export's duration, every enabled static
integer quantizer is routed through ModelOpt's public backend hook (``register_quant_backend``) to the same op the
CUDA path records, and put back afterwards. NVFP4 quantizers (``tensorrt.dynamic_block_quantize_op``) export on a
CPU as they are, but run eagerly only with CUDA: ``eager_quantizers`` routes them to trtcheck's op for eager runs.

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


def _exported_by_hook(quantizer: torch.nn.Module) -> bool:
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


def _bits(value: Any) -> tuple[int, int]:
    """ModelOpt's ``(exponent, mantissa)`` bits as ``(num_bits, exponent_bits)``."""
    exponent, mantissa = value
    return exponent + mantissa + 1, exponent


def _nvfp4_block(quantizer: Any, rank: int | None = None) -> int | None:
    """The block size of an NVFP4 quantizer ModelOpt can only run with CUDA (dynamic blocks, E2M1 values, E4M3
    scales, its amax off CUDA), or None for any other quantizer."""
    blocks = getattr(quantizer, "block_sizes", None)
    amax = getattr(quantizer, "_amax", None)
    if (type(quantizer).__name__ != "TensorQuantizer" or not isinstance(blocks, dict) or blocks.get("type") != "dynamic"
            or amax is None or amax.is_cuda):
        return None
    num_bits, scale_bits = getattr(quantizer, "num_bits", None), blocks.get("scale_bits")
    if not (isinstance(num_bits, tuple) and isinstance(scale_bits, tuple)):
        return None
    size = blocks.get(-1) or (blocks.get(rank - 1) if rank is not None else None)
    if size is None or qdq.block_format_of(size, *_bits(num_bits), *_bits(scale_bits)) is None:
        return None
    return int(size)


def _as_trtcheck_block_op(inputs: torch.Tensor, quantizer: Any) -> torch.Tensor:
    """An NVFP4 quantizer as trtcheck's op (TensorRT's arithmetic), the op its export lowers to."""
    size = _nvfp4_block(quantizer, inputs.dim())
    assert size is not None  # only NVFP4 quantizers are routed here
    return qdq.dynamic_block_quantize_op(inputs, size, quantizer.amax.detach(), *_bits(quantizer.num_bits),
                                         *_bits(quantizer.block_sizes["scale_bits"]))


@contextlib.contextmanager
def _routed(chosen: list[torch.nn.Module], backend: str, entrypoint: Callable[[torch.Tensor, Any], torch.Tensor]) -> Iterator[None]:
    """``chosen`` quantizers computed by ``entrypoint`` inside this block, through ModelOpt's public backend hook
    (``register_quant_backend``), each quantizer's ``backend`` put back however the block ends."""
    if not chosen:
        yield
        return
    # Deferred: ModelOpt is an optional dependency ([quant]), and a model holding its quantizers has imported it.
    hooks = importlib.import_module("modelopt.torch.quantization.nn.modules.tensor_quantizer")
    hooks.register_quant_backend(backend, entrypoint)
    try:
        for quantizer in chosen:
            quantizer.backend = backend
        yield
    finally:
        for quantizer in chosen:
            quantizer.backend = None
        hooks.unregister_quant_backend(backend)


@contextlib.contextmanager
def quantized_export(model: torch.nn.Module) -> Iterator[None]:
    """Export ``model`` inside this block as Torch-TensorRT would: nothing changes for a model without ModelOpt
    quantizers; with them, ModelOpt's export mode is on and its integer quantizers are routed to
    ``tensorrt.quantize_op`` (module docstring)."""
    found = quantizers(model)
    if not found:
        yield
        return
    utils = importlib.import_module("modelopt.torch.quantization.utils")
    with _routed([quantizer for _, quantizer in found if _exported_by_hook(quantizer)], _BACKEND, _as_tensorrt_op):
        with utils.export_torch_mode():
            yield


@contextlib.contextmanager
def eager_quantizers(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` eagerly inside this block on a machine without CUDA: ModelOpt computes NVFP4 fake quantization
    with CUDA kernels only, so each NVFP4 quantizer whose amax is off CUDA computes trtcheck's op instead (TensorRT's
    arithmetic, ``qdq.dynamic_block_quantize_op``, which is what ModelOpt's kernel computes too), routed as
    ``quantized_export`` routes integer quantizers and put back after. Nothing changes for any other quantizer."""
    chosen = [quantizer for _, quantizer in quantizers(model)
              if _nvfp4_block(quantizer) is not None and getattr(quantizer, "backend", None) is None]
    with _routed(chosen,
                 "trtcheck_eager", _as_trtcheck_block_op):
        yield


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


def _trtcheck_block_quantize(input: torch.Tensor, block_size: int, amax: torch.Tensor, num_bits: int, exponent_bits: int,
                             scale_num_bits: int, scale_exponent_bits: int, *_: Any) -> torch.Tensor:
    """``tensorrt.dynamic_block_quantize_op`` (NVFP4) as trtcheck's op."""
    return qdq.dynamic_block_quantize_op(input, block_size, amax, num_bits, exponent_bits, scale_num_bits, scale_exponent_bits)


def quantize_decompositions() -> dict[Any, Callable[..., Any]]:
    """Decomposition-table entries that make ModelOpt's ``tensorrt.quantize_op`` and ``dynamic_block_quantize_op``
    trtcheck's ops; none where no such op is registered (ModelOpt not imported)."""
    try:
        static, blocked = torch.ops.tensorrt.quantize_op.default, torch.ops.tensorrt.dynamic_block_quantize_op.default
    except (AttributeError, RuntimeError):
        return {}
    return {static: _trtcheck_quantize, blocked: _trtcheck_block_quantize}


def quantizer_call(node: torch.fx.Node) -> qdq.QuantCall | None:
    """What the quantizer ``node`` of a lowered graph quantizes (``qdq.QuantCall``: its input and amax as nodes), or
    None where ``node`` is no quantizer."""
    return qdq.quant_call(node.target, node.args) if node.op == "call_function" else None


def is_quantize(node: torch.fx.Node) -> bool:
    """A quantizer of a lowered graph: a ``trtcheck.quantize_op`` or ``trtcheck.dynamic_block_quantize_op`` call."""
    return quantizer_call(node) is not None


__all__ = [
    "eager_quantizers", "is_quantize", "quantize_decompositions", "quantized_export", "quantizer_call", "quantizers",
    "register_modelopt_ops",
]
