"""Harness for converters with dynamic (symbolic) shapes: export with ``dynamic_shapes``, partition, convert
the one TensorRT segment to ONNX once, then run that one model at several sizes in ONNX Runtime and compare
each run with eager PyTorch at the same size.

One model for every size is the point: a converter that read the example's size from metadata would give a
model that is right at the example and wrong (or failing) everywhere else, so every case runs at the
range's minimum, the example, the maximum and a random size in between.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.fx
from torch.export import Dim

import trtcheck
from suites.conversion.converter_harness import Fn, emitted_ops, export_graph, randn, tensorrt_type_violations
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.ops.trt_onnx_ops import TENSORRT_ONNX_OPS
from trtcheck.engines.emulation import emulate_fp4
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target


@dataclass(frozen=True)
class DynCase:
    """One dynamic converter case: ``fn(*inputs(n))`` with the sizes ``dims(Dim)`` marks dynamic.

    ``inputs(n)`` builds the inputs at size ``n`` (the same seed at every size); ``dims(d)`` gives one
    ``dynamic_shapes`` entry per input (``{axis: d}`` or None), ``d`` spanning ``low..high``. ``targets`` must
    be in the exported graph (so a case cannot silently test something else).
    """

    id: str
    targets: tuple[Any, ...]
    fn: Callable[..., Any]
    inputs: Callable[[int], tuple[Any, ...]]
    dims: Callable[[Any], tuple[Any, ...]]
    low: int = 2
    high: int = 16
    example: int = 6
    decompose: bool = False
    rtol: float | None = None
    atol: float | None = None

    def sizes(self) -> list[int]:
        """Minimum, example, maximum and one random size in range (seeded by the case id)."""
        return [self.low, self.example, self.high, random.Random(self.id).randint(self.low, self.high)]


def export(fn: Callable[..., Any] | torch.nn.Module, args: Sequence[Any], dynamic_shapes: Any,
           decompose: bool = False) -> torch.fx.GraphModule:
    """The graph the partitioner sees: ``trtcheck.lower`` (core ATen) with ``decompose``, else the exported
    graph as it is, so an overload the function calls directly stays in it."""
    if not decompose:
        return export_graph(fn, args, dynamic_shapes=dynamic_shapes)
    module = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    shapes = (tuple(dynamic_shapes),) if isinstance(module, Fn) else dynamic_shapes  # forward(*args): one tuple
    return trtcheck.lower(module.eval(), tuple(args), dynamic_shapes=shapes)


def only_segment(partition: Partition) -> Segment:
    """The partition's one TensorRT segment, which must hold every compute node."""
    trt = partition.segments_of(Target.TENSORRT)
    assert len(partition.segments) == 1 and len(trt) == 1, partition.explain()
    return trt[0]


def convert_segment(gm: torch.fx.GraphModule, segment: Segment) -> onnx.ModelProto:
    """The segment's ONNX model, checked to use only what TensorRT's parser takes."""
    model = segment_to_onnx(segment_module(gm, segment))
    foreign = emitted_ops(model) - TENSORRT_ONNX_OPS
    assert not foreign, f"ONNX ops TensorRT does not support: {foreign}"
    wrong_types = tensorrt_type_violations(model)
    assert not wrong_types, f"ONNX ops on types TensorRT does not support: {wrong_types}"
    return model


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # TensorRT's own ops (NVFP4) run as the ONNX Runtime engine runs them: emulated with ordinary ops
    return ort.InferenceSession(emulate_fp4(model).SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_segment(sess: ort.InferenceSession, gm: torch.fx.GraphModule, segment: Segment, args: Sequence[Any]
                ) -> list[torch.Tensor]:
    """The segment's outputs for the graph's inputs ``args``, in the order of the graph's own outputs."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [a for a in torch.utils._pytree.tree_leaves(list(args)) if isinstance(a, torch.Tensor)]
    assert len(placeholders) == len(tensors), ([p.name for p in placeholders], len(tensors))
    wanted = {i.name for i in sess.get_inputs()}
    feeds = {p.name: t.detach().numpy() for p, t in zip(placeholders, tensors) if p.name in wanted}
    results = sess.run(None, feeds)
    outputs = torch.utils._pytree.tree_leaves(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    return [torch.from_numpy(np.asarray(results[segment.outputs.index(node)])) for node in outputs]


def eager(fn: Callable[..., Any] | torch.nn.Module, args: Sequence[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t for t in torch.utils._pytree.tree_leaves(fn(*args)) if isinstance(t, torch.Tensor)]


def check_case(case: DynCase) -> onnx.ModelProto:
    """Export at the example size, convert once, and match eager PyTorch at every size of ``case.sizes()``."""
    dim = Dim("n", min=case.low, max=case.high)
    gm = export(case.fn, case.inputs(case.example), case.dims(dim), case.decompose)
    present = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    missing = [t for t in case.targets if t not in present]
    assert not missing, f"{missing} not in the exported graph: {sorted(map(str, present))}"
    assert any(_symbolic(n) for n in gm.graph.nodes), "the export specialized every size: nothing dynamic is tested"
    segment = only_segment(partition_graph(gm, trtcheck.Settings(min_block_size=1)))
    model = convert_segment(gm, segment)
    sess = session(model)
    for n in case.sizes():
        args = case.inputs(n)
        for got, want in zip(run_segment(sess, gm, segment, args), eager(case.fn, args), strict=True):
            torch.testing.assert_close(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True,
                                       msg=lambda m, n=n: f"at size {n}: {m}")
    return model


def _symbolic(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return not all(isinstance(d, int) for d in value.shape)
    return isinstance(value, torch.SymInt)


# ---- SymInt targets in the static case table ------------------------------------------------------------------
def dynamic_rows(*shape: int) -> torch.Tensor:
    """A tensor whose dim 0 ``torch.export`` keeps symbolic (``mark_dynamic``), so a graph built by the static
    converter harness holds ``sym_size`` and SymInt arithmetic too."""
    x = randn(*shape)
    torch._dynamo.mark_dynamic(x, 0)
    return x


def _sized(size: Callable[[Any], Any]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: torch.ops.aten.full.default([size(torch.ops.aten.sym_size.int(x, 0)), 2], 1.0) + x.sum()


# ``(id, targets, fn, inputs)`` rows for ``converter_cases.CASES``: every registered target needs a case there,
# SymInt arithmetic included; ``test_dynamic_converters.py`` runs them across sizes.
SYMINT_CASES = [
    ("symint-sym_size-mul-view", (torch.ops.aten.sym_size.int, operator.mul),
     lambda x: torch.ops.aten.view.default(x, [torch.ops.aten.sym_size.int(x, 0) * 3]), lambda: (dynamic_rows(6, 3),)),
    ("symint-add-neg", (operator.add, operator.neg), _sized(lambda n: -n + 20), lambda: (dynamic_rows(6, 3),)),
    ("symint-sub-floordiv", (operator.sub, operator.floordiv), _sized(lambda n: (n - 20) // 3 + 10), lambda: (dynamic_rows(6, 3),)),
    ("symint-mod", (operator.mod,), _sized(lambda n: (n - 20) % 7 + 2), lambda: (dynamic_rows(6, 3),)),
    ("symint-sym_max-sym_min", (torch.sym_max, torch.sym_min), _sized(lambda n: torch.sym_max(torch.sym_min(n, 9), 3)),
     lambda: (dynamic_rows(6, 3),)),
    ("symint-sym_sum", (torch.sym_sum,), _sized(lambda n: torch.sym_sum([n, n, 3])), lambda: (dynamic_rows(6, 3),)),
]
