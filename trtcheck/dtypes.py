"""The one dtype table: torch <-> ONNX <-> TensorRT, for converters, engines and shape analysis alike.

Three tables used to disagree (int8, int16 and float64 were each in some and not in others), so a dtype
could be claimed by a validator, refused by the ONNX writer and accepted by an engine. Every question
about a dtype is answered here, from one row per dtype:

- ``onnx``: the ONNX ``TensorProto`` element type, or ``None`` where ONNX has no equivalent.
- ``tensorrt``: the name of the ``tensorrt.DataType`` member (TensorRT 10), or ``None`` where TensorRT
  has no plain tensor of that type. A name, not the member: TensorRT is optional and usually absent.
- ``in_engine``: whether a TensorRT segment may hold it at all, inside or across its boundary. float64
  (TensorRT has none), int16 (none) and int8/uint8 (TensorRT's int8 is a quantized type with scales;
  uint8 is an I/O-only type) stay in PyTorch, on every backend: ONNX Runtime would run them, but then a
  partition that passes on ONNX Runtime would not build on TensorRT.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import torch

from trtcheck.errors import UnsupportedDtypeError


@dataclass(frozen=True)
class DtypeRow:
    torch: torch.dtype
    onnx: int | None
    tensorrt: str | None
    in_engine: bool


_P = onnx.TensorProto
ROWS: tuple[DtypeRow, ...] = (
    DtypeRow(torch.float32, _P.FLOAT, "FLOAT", True),
    DtypeRow(torch.float16, _P.FLOAT16, "HALF", True),
    DtypeRow(torch.bfloat16, _P.BFLOAT16, "BF16", True),
    DtypeRow(torch.int32, _P.INT32, "INT32", True),
    DtypeRow(torch.int64, _P.INT64, "INT64", True),
    DtypeRow(torch.bool, _P.BOOL, "BOOL", True),
    DtypeRow(torch.float64, _P.DOUBLE, None, False),
    DtypeRow(torch.int16, _P.INT16, None, False),
    DtypeRow(torch.int8, _P.INT8, "INT8", False),
    DtypeRow(torch.uint8, _P.UINT8, "UINT8", False),
)
_BY_TORCH = {row.torch: row for row in ROWS}
_BY_TENSORRT = {row.tensorrt: row for row in ROWS if row.tensorrt is not None}

FLOAT: frozenset[torch.dtype] = frozenset({torch.float32, torch.float16, torch.bfloat16})
PRECISION_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}
"""``Settings.precision`` below fp32 -> the torch dtype of that precision (eager's yardstick, its range)."""
INT: frozenset[torch.dtype] = frozenset({torch.int32, torch.int64})
NUMERIC: frozenset[torch.dtype] = FLOAT | INT
BOOL: frozenset[torch.dtype] = frozenset({torch.bool})
#: What a TensorRT segment may hold (see ``in_engine`` above).
ENGINE_DTYPES: frozenset[torch.dtype] = frozenset(row.torch for row in ROWS if row.in_engine)


def _supported(world: str) -> str:
    return ", ".join(str(r.torch).removeprefix("torch.") for r in ROWS if getattr(r, world) is not None)


def row(dtype: torch.dtype) -> DtypeRow:
    try:
        return _BY_TORCH[dtype]
    except KeyError:
        raise UnsupportedDtypeError(
            f"dtype {dtype} is not one trtcheck can place in an engine (known: {_supported('onnx')}); "
            "keep the ops producing or consuming it in PyTorch"
        ) from None


def to_onnx(dtype: torch.dtype) -> int:
    """The ONNX element type of ``dtype``."""
    value = row(dtype).onnx
    if value is None:  # pragma: no cover - every row has an ONNX type today
        raise UnsupportedDtypeError(f"dtype {dtype} has no ONNX equivalent (supported: {_supported('onnx')})")
    return value


def engine_onnx_type(dtype: torch.dtype) -> int:
    """The ONNX element type of ``dtype`` where a TensorRT segment may hold it (``ENGINE_DTYPES``).

    ONNX could express float64 or int8, but a segment holding them would run on ONNX Runtime and then
    fail to build on TensorRT, so converters and both engine backends refuse them through this one check.
    """
    if dtype not in ENGINE_DTYPES:
        supported = ", ".join(sorted(str(d).removeprefix("torch.") for d in ENGINE_DTYPES))
        raise UnsupportedDtypeError(
            f"dtype {dtype} cannot be held by a TensorRT segment (supported: {supported}); "
            "keep the ops producing or consuming it in PyTorch"
        )
    return to_onnx(dtype)


def to_tensorrt_name(dtype: torch.dtype) -> str:
    """The ``tensorrt.DataType`` member name of ``dtype`` (``getattr(trt.DataType, name)`` gives it)."""
    name = row(dtype).tensorrt
    if name is None:
        raise UnsupportedDtypeError(
            f"dtype {dtype} has no TensorRT equivalent (supported: {_supported('tensorrt')}); "
            "keep the ops producing or consuming it in PyTorch"
        )
    return name


def from_tensorrt_name(name: str) -> torch.dtype:
    """The torch dtype of a ``tensorrt.DataType`` member name (``DataType.HALF.name`` is ``"HALF"``)."""
    try:
        return _BY_TENSORRT[name].torch
    except KeyError:
        raise UnsupportedDtypeError(f"TensorRT dtype {name} has no torch dtype in trtcheck's table") from None
