"""Quantized models: zoo entries quantized by NVIDIA ModelOpt with explicit Q/DQ (TensorRT 11's only quantization).

Each entry is another entry of the zoo (its model and example inputs, built as that entry builds them) quantized
with one of ModelOpt's configs, ``mtq.INT8_DEFAULT_CFG``, ``mtq.FP8_DEFAULT_CFG`` or ``mtq.NVFP4_DEFAULT_CFG``, and
calibrated on the example and four random input sets drawn like it: ResNet-18 and MobileNetV3-Small at 64 x 64 in
INT8 and FP8 (INT8 with per-channel weights), and the tiny Llama of the ``hf`` family with FP8 and with NVFP4
Linears. docs/quantization.md says what trtcheck does with them.

They are opt-in (``registry.OPT_IN``): a quantized model verifies in tens of seconds (every quantizer is also built
alone, and what each costs is measured in float64), so "every model" (``names()``, the matrix's default ``*``)
leaves them out and a pattern naming them selects them: ``pytest --trtcheck --trtcheck-models 'quantized_*'``.
``nvidia-modelopt`` is an optional extra (``pip install -e '.[quant]'``, also in ``dev``), imported when an entry is
built; without it nothing is registered and ``QUANTIZED_UNAVAILABLE`` says why.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import torch
from torch import nn

from .registry import ZooEntry, get, register, seeded

__all__ = ["QUANTIZED_UNAVAILABLE", "QUANTIZED_ZOO", "base_model"]

IMAGE = 64  # a quarter of the classifiers' own size: verify runs every quantizer alone and twice in float64
CALIBRATION_SETS = 4
CONFIGS = {"int8": "INT8_DEFAULT_CFG", "fp8": "FP8_DEFAULT_CFG", "nvfp4": "NVFP4_DEFAULT_CFG"}
_SPECS = (("resnet18", "int8"), ("resnet18", "fp8"), ("mobilenet_v3_small", "int8"), ("mobilenet_v3_small", "fp8"),
          ("hf_llama", "fp8"), ("hf_llama", "nvfp4"))


def _like(value: Any, generator: torch.Generator) -> Any:
    """A calibration input like ``value``: floating tensors drawn again, anything else (token ids, masks) kept."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.randn(value.shape, generator=generator, dtype=value.dtype)
    return value


def _base(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    model, inputs = get(name).build()
    if name in ("resnet18", "mobilenet_v3_small"):
        inputs = (torch.randn(1, 3, IMAGE, IMAGE),)
    return model, inputs


def base_model(name: str) -> nn.Module:
    """The float model the quantized entry ``name`` quantizes, with the same weights (its base entry is seeded)."""
    base = name.removeprefix("quantized_").rsplit("_", 1)[0]
    return get(base).build()[0]


def _build(base: str, fmt: str) -> tuple[nn.Module, tuple[Any, ...]]:
    """``base`` quantized by ModelOpt's ``fmt`` config, calibrated on its example and random sets like it."""
    mtq = importlib.import_module("modelopt.torch.quantization")  # deferred: ModelOpt is optional, and slow to import
    model, inputs = _base(base)
    generator = torch.Generator().manual_seed(1)
    sets = [inputs, *(tuple(_like(value, generator) for value in inputs) for _ in range(CALIBRATION_SETS))]

    def calibrate(module: nn.Module) -> None:
        with torch.no_grad():
            for calibration in sets:
                module(*calibration)

    return mtq.quantize(model, getattr(mtq, CONFIGS[fmt]), calibrate), inputs


def _entry(base: str, fmt: str) -> ZooEntry:
    tags = {"quantized", fmt, *(get(base).tags - {"heavy"})}
    return ZooEntry(f"quantized_{base}_{fmt}", seeded()(functools.partial(_build, base, fmt)), tags)


def _unavailable() -> str | None:
    if importlib.util.find_spec("modelopt") is None:
        return "nvidia-modelopt is not installed, so no quantized_* zoo entry is registered: pip install -e '.[quant]'"
    missing = [base for base, _ in _SPECS if not _registered(base)]
    return f"the zoo has no {', '.join(missing)} to quantize (install the hf extra)" if missing else None


def _registered(name: str) -> bool:
    try:
        get(name)
    except KeyError:
        return False
    return True


#: Why there are no quantized entries, or None when there are.
QUANTIZED_UNAVAILABLE: str | None = _unavailable()

QUANTIZED_ZOO: tuple[str, ...] = () if QUANTIZED_UNAVAILABLE else tuple(register(_entry(*spec)).name for spec in _SPECS)
