"""Conversion of TensorRT segments to ONNX: context, converter registry, interpreter and op converters.

Laid out like Torch-TensorRT's ``dynamo/conversion/`` and onnxscript's torchlib:

- :mod:`~trtcheck.conversion.context`: :class:`ConversionContext` (what a converter emits through) and
  :class:`ConversionError`;
- :mod:`~trtcheck.conversion.registry`: which converter (and validator) handles which ATen overload;
- :mod:`~trtcheck.conversion.interpreter`: :func:`segment_to_onnx`, one segment -> one ONNX model;
- :mod:`~trtcheck.conversion.ops`: the built-in converters, one module per op family.

The dependency order is context <- registry <- ops <- interpreter; importing this package imports the
ops, so the registry is always populated once ``trtcheck.conversion`` has been imported.
"""

from trtcheck.conversion import ops  # noqa: F401 - imported for its registrations
from trtcheck.conversion.context import ConversionContext, onnx_dtype
from trtcheck.conversion.interpreter import OPSET, segment_to_onnx
from trtcheck.conversion.registry import (
    Converter,
    Snapshot,
    Verdict,
    get,
    is_convertible,
    register,
    registered_targets,
    unregister,
    verdict,
)
from trtcheck.errors import ConversionError

__all__ = [
    "OPSET",
    "ConversionContext",
    "ConversionError",
    "Converter",
    "Snapshot",
    "Verdict",
    "get",
    "is_convertible",
    "onnx_dtype",
    "register",
    "registered_targets",
    "segment_to_onnx",
    "unregister",
    "verdict",
]
