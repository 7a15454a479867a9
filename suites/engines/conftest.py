"""Fixtures for engine tests: tiny ONNX models built with ``onnx.helper`` from TensorSpecs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx
import pytest
from onnx import helper

from trtcheck.engines.base import onnx_elem_type
from trtcheck.engines.specs import TensorSpec

ModelFactory = Callable[[Sequence[onnx.NodeProto], Sequence[TensorSpec], Sequence[TensorSpec]], onnx.ModelProto]


def _value_info(spec: TensorSpec) -> onnx.ValueInfoProto:
    dims = [d if d >= 0 else None for d in spec.shape]
    return helper.make_tensor_value_info(spec.name, onnx_elem_type(spec.dtype), dims)


@pytest.fixture
def make_model() -> ModelFactory:
    """Build a checked opset-17 model whose graph I/O are exactly the given specs."""

    def build(
        nodes: Sequence[onnx.NodeProto], inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            list(nodes), "segment", [_value_info(s) for s in inputs], [_value_info(s) for s in outputs]
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model)
        return model

    return build
