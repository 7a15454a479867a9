"""Weights held by reference: the placeholder format of a segment's ONNX model, and the self-contained model.

A converted segment keeps every weight (an initializer of more than 1024 elements) as a *placeholder*: its dtype
and dims, its data external at ``WEIGHT_LOCATION``, the tensor itself in memory beside the model. Conversion writes
placeholders (``weight_placeholder``); the compiler's precision rewrite converts their tensors; an engine that takes
weights copies each once, any other gets the self-contained model (``with_weights``). Below conversion and engines,
so that both read one format.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx
import torch
from onnx import TensorProto

from trtcheck import dtypes
from trtcheck.errors import ConversionError

__all__ = ["WEIGHT_LOCATION", "fill_weight", "weight_bytes", "weight_placeholder", "with_weights"]

WEIGHT_LOCATION = "trtcheck-weight-in-memory"
"""The external-data ``location`` of a weight's placeholder: its data is a tensor in memory, not in a file."""


def weight_placeholder(name: str, tensor: torch.Tensor) -> onnx.TensorProto:
    """The initializer ``name`` of a weight held by reference: its dtype and dims, its data external at
    ``WEIGHT_LOCATION`` (``tensor``, in memory). ``with_weights`` fills it in. ``ConversionError`` for a dtype a
    TensorRT segment may not hold."""
    try:
        elem_type = dtypes.engine_onnx_type(tensor.dtype)
    except dtypes.UnsupportedDtypeError as error:
        raise ConversionError(str(error)) from None
    proto = TensorProto(name=name, data_type=elem_type, dims=list(tensor.shape))
    proto.data_location = TensorProto.EXTERNAL
    proto.external_data.add(key="location", value=WEIGHT_LOCATION)
    return proto


def weight_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a (CPU) weight: what ONNX's ``raw_data`` holds (torch's memory is little-endian, as ONNX's
    raw data is, on every platform trtcheck runs on). No copy of a contiguous weight; a view of one
    (``ConversionContext.permuted_weight``) is copied here, one weight at a time."""
    return memoryview(tensor.detach().reshape(-1).view(torch.uint8).numpy())


def fill_weight(proto: onnx.TensorProto, tensor: torch.Tensor) -> None:
    """Turn the placeholder ``proto`` into an ordinary initializer holding ``tensor``'s bytes (one copy)."""
    proto.ClearField("external_data")
    proto.ClearField("data_location")
    proto.raw_data = weight_bytes(tensor).tobytes()


def with_weights(model: onnx.ModelProto, weights: Mapping[str, torch.Tensor]) -> onnx.ModelProto:
    """A copy of ``model`` whose weight placeholders (``weight_placeholder``) hold their tensors' bytes: the
    self-contained ONNX model, holding the weights once. ``model`` (holding no weight data: copying it is
    cheap) is left as it is."""
    full = onnx.ModelProto()
    full.CopyFrom(model)
    for proto in full.graph.initializer:
        tensor = weights.get(proto.name) if proto.data_location == TensorProto.EXTERNAL else None
        if tensor is not None:
            fill_weight(proto, tensor)
    return full
