"""Test harness for converters: export a function, convert its whole graph as one segment, run it in
ONNX Runtime and compare with eager PyTorch.

Graphs are built as the partitioner builds them (``torch.export`` -> ``ep.module()`` without the
``_guards_fn`` call_module); ``decompose=True`` additionally runs ``run_decompositions()`` (core ATen),
otherwise the ATen overloads the function calls directly stay in the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.fx

from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.ops.trt_onnx_ops import TENSORRT_ONNX_OPS, TENSORRT_ONNX_TYPES
from trtcheck.engines.emulation import emulate_fp4
from trtcheck.lowering.export import drop_guards
from trtcheck.onnx_format.tensorrt_parser import TENSORRT_DOMAIN, TENSORRT_DOMAIN_OPS

aten = torch.ops.aten


class Fn(torch.nn.Module):
    """A function of tensors as a module (export takes modules), for one-op models in tests."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def export_graph(fn: Callable[..., Any] | torch.nn.Module, args: Sequence[Any], decompose: bool = False,
                 dynamic_shapes: Any = None) -> torch.fx.GraphModule:
    """The fx GraphModule the partitioner would see for ``fn(*args)``, minus the guards call. A function's
    ``dynamic_shapes`` list one entry per argument (``Fn.forward(*args)`` takes them as one tuple)."""
    module = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    if dynamic_shapes is not None and isinstance(module, Fn):
        dynamic_shapes = (tuple(dynamic_shapes),)
    with torch.no_grad():
        ep = torch.export.export(module.eval(), tuple(args), dynamic_shapes=dynamic_shapes)
        if decompose:
            ep = ep.run_decompositions()
    gm = ep.module()
    drop_guards(gm)
    return gm


def graph_targets(gm: torch.fx.GraphModule) -> set[Any]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def run_onnx(model: onnx.ModelProto, gm: torch.fx.GraphModule, args: Sequence[Any]) -> list[np.ndarray]:
    """Feed the tensors of ``args`` to the ONNX model's inputs (placeholders, in order)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # TensorRT's own ops (NVFP4) run as the ONNX Runtime engine runs them: emulated with ordinary ops
    session = ort.InferenceSession(emulate_fp4(model).SerializeToString(), options, providers=["CPUExecutionProvider"])
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [a for a in torch.utils._pytree.tree_leaves(list(args)) if isinstance(a, torch.Tensor)]
    assert len(placeholders) == len(tensors), (placeholders, len(tensors))
    feeds = {name: t.detach().numpy() for name, t in zip(placeholders, tensors)}
    return session.run(None, feeds)


def emitted_ops(model: onnx.ModelProto) -> set[str]:
    """The op types of ``model``'s nodes; TensorRT's own ops (its ``trt`` domain, which its parser reads) are left out
    when TensorRT documents them (``TENSORRT_DOMAIN_OPS``), and named with their domain otherwise."""
    return {node.op_type if not node.domain else f"{node.domain}::{node.op_type}" for node in model.graph.node
            if not (node.domain == TENSORRT_DOMAIN and node.op_type in TENSORRT_DOMAIN_OPS)}


def tensorrt_type_violations(model: onnx.ModelProto) -> list[str]:
    """Nodes whose data type TensorRT's parser does not accept for their op (see TENSORRT_ONNX_TYPES)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    types = {t.name: t.data_type for t in inferred.initializer}
    for value in [*inferred.input, *inferred.value_info, *inferred.output]:
        types[value.name] = value.type.tensor_type.elem_type
    violations = []
    for node in inferred.node:
        checked = [node.input[1 if node.op_type == "Where" else 0]]
        checked += list(node.output) if node.op_type == "Cast" else []
        for name in checked:
            type_name = onnx.TensorProto.DataType.Name(types[name])
            if type_name not in TENSORRT_ONNX_TYPES.get(node.op_type, ()):
                violations.append(f"{node.op_type} on {type_name}")
    return violations


@dataclass
class Result:
    gm: torch.fx.GraphModule
    model: onnx.ModelProto
    expected: list[torch.Tensor]
    actual: list[np.ndarray] = field(default_factory=list)


def convert(fn: Callable[..., Any] | torch.nn.Module, args: Sequence[Any], decompose: bool = False) -> Result:
    """Export + convert, without running anything."""
    gm = export_graph(fn, args, decompose)
    model = segment_to_onnx(gm)
    with torch.no_grad():
        expected = fn(*args)
    flat = [t for t in torch.utils._pytree.tree_leaves(expected)]
    return Result(gm, model, flat)


def check(
    fn: Callable[..., Any] | torch.nn.Module,
    args: Sequence[Any],
    *,
    targets: Sequence[Any] = (),
    decompose: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
) -> Result:
    """Convert ``fn``'s graph, run it in ONNX Runtime and assert it matches eager PyTorch.

    Also asserts that each of ``targets`` is really in the graph (so a case cannot silently test
    something else after an upstream decomposition change) and that only TensorRT ONNX ops are used.
    """
    result = convert(fn, args, decompose)
    present = graph_targets(result.gm)
    missing = [t for t in targets if t not in present]
    assert not missing, f"{missing} not in the exported graph: {sorted(map(str, present))}"
    foreign = emitted_ops(result.model) - TENSORRT_ONNX_OPS
    assert not foreign, f"ONNX ops TensorRT does not support: {foreign}"
    wrong_types = tensorrt_type_violations(result.model)
    assert not wrong_types, f"ONNX ops on types TensorRT does not support: {wrong_types}"
    result.actual = run_onnx(result.model, result.gm, args)
    assert len(result.actual) == len(result.expected)
    for got, want in zip(result.actual, result.expected):
        torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want, rtol=rtol, atol=atol, equal_nan=True)
    return result


# ---- input factories ------------------------------------------------------------------------------
def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def positive(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return (torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 3 + 0.1).to(dtype)


def unit(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Values in (-0.9, 0.9): domain of asin/acos/atanh."""
    return ((torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * 0.9).to(dtype)


def randint(*shape: int, low: int = -10, high: int = 10, dtype: torch.dtype = torch.int64, seed: int = 0
            ) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def nonzero_int(*shape: int, dtype: torch.dtype = torch.int64, seed: int = 0) -> torch.Tensor:
    x = randint(*shape, low=1, high=8, dtype=dtype, seed=seed)
    return torch.where(randint(*shape, low=0, high=2, seed=seed + 1) == 0, -x, x)


def bools(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.5

