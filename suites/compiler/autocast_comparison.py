"""trtcheck's mixed-precision graph beside NVIDIA ModelOpt AutoCast's, on the zoo's segments.

    PYTHONPATH=$PWD:<modelopt site> python -m suites.compiler.autocast_comparison [--models resnet18,hf_bert] [--keep-op ...]

ModelOpt is no dependency of trtcheck (its pins would replace trtcheck's own onnx and onnxruntime); to run this, install it beside the venv,
without its pinned dependencies (``onnx~=1.21``, ``onnxruntime-gpu~=1.24``, ``cupy-cuda12x``, which would replace
trtcheck's own): ``pip install --no-deps --target <site> nvidia-modelopt==0.47.0 onnx-graphsurgeon==0.6.1
onnxconverter-common==1.16.0 polygraphy==0.53.6 lief onnxscript onnx-ir onnxslim omegaconf antlr4-python3-runtime pulp
nvidia-ml-py rich regex safetensors tqdm PyYAML colorama``.

For each zoo model, each float32 segment trtcheck converts is made fp16 twice: by ``modelopt.onnx.autocast.
convert_to_f16(keep_io_types=True, op_block_list=...)`` and by ``compiler.mixed_precision.to_mixed_precision`` (the same ops
kept: ``--keep-op LayerNormalization`` is ``fp32_nodes=["aten::native_layer_norm"]``'s ONNX op). Per segment it prints:
the original nodes each computes in float32 (by node name, which both keep), the original values whose element type
differs between the two graphs, the Casts each adds, how many doc_strings (trtcheck's node origins) survive, the opset,
the seconds each took, and the largest difference of their outputs on ONNX Runtime (both through trtcheck's
emulation: computed in float32, rounded after every node) on one random input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto

import trtcheck
import trtcheck_zoo
from trtcheck.compiler.mixed_precision import to_mixed_precision
from trtcheck.engines.emulation import emulate
from trtcheck.names import resolve_fp32_nodes

_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}
_ATEN_OF = {"LayerNormalization": "aten::native_layer_norm", "Softmax": "aten::_softmax", "ReduceMean": "aten::mean"}


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model).graph
    found = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    found.update({i.name: i.data_type for i in inferred.initializer})
    return {name: elem for name, elem in found.items() if elem in _FLOATS}


def _float32_nodes(model: onnx.ModelProto, names: set[str]) -> set[str]:
    """The nodes among ``names`` whose float outputs are float32."""
    types = _types(model)
    return {n.name for n in model.graph.node if n.name in names and any(types.get(o) == TensorProto.FLOAT for o in n.output)}


def _outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(emulate(model)[0].SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        feeds[value.name] = (rng.standard_normal(shape) if np.issubdtype(dtype, np.floating) else rng.integers(0, 8, shape)).astype(dtype)
    return feeds


def compare(name: str, keep_ops: list[str]) -> list[str]:
    from modelopt.onnx.autocast import convert_to_f16

    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    lines = []
    keep = resolve_fp32_nodes([_ATEN_OF[op] for op in keep_ops]) if keep_ops else None
    for index in compiled.conversion.onnx_models:
        segment = onnx.load_from_string(compiled.conversion.onnx_models[index])
        names = {n.name for n in segment.graph.node}
        start = time.perf_counter()
        try:
            theirs = convert_to_f16(segment, "fp16", keep_io_types=True, op_block_list=list(keep_ops))
        except Exception as error:  # noqa: BLE001 - a measurement: say what AutoCast did
            lines.append(f"{name} segment {index} ({len(names)} nodes): AutoCast failed: {type(error).__name__}: {str(error)[:200]}")
            continue
        their_seconds = time.perf_counter() - start
        start = time.perf_counter()
        mine = to_mixed_precision(segment, "fp16", keep=keep).model
        my_seconds = time.perf_counter() - start
        their_f32, my_f32 = _float32_nodes(theirs, names), _float32_nodes(mine, names)
        their_types, my_types = _types(theirs), _types(mine)
        values = {o for n in segment.graph.node for o in n.output} | {i.name for i in segment.graph.initializer}
        differ = sorted(v for v in values if v in their_types and v in my_types and their_types[v] != my_types[v])
        docs = {n.name: n.doc_string for n in segment.graph.node}
        kept_docs = {label: sum(1 for n in graph.graph.node if n.name in docs and n.doc_string == docs[n.name] and docs[n.name])
                     for label, graph in (("AutoCast", theirs), ("trtcheck", mine))}
        graphs = (("AutoCast", theirs), ("trtcheck", mine))
        casts = {label: sum(1 for n in graph.graph.node if n.op_type == "Cast") for label, graph in graphs}
        feeds = _feeds(segment)
        try:
            difference = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                             for a, b in zip(_outputs(theirs, feeds), _outputs(mine, feeds)))
        except Exception as error:  # noqa: BLE001
            difference = f"not run ({type(error).__name__}: {str(error)[:120]})"
        lines.append(
            f"{name} segment {index} ({len(names)} nodes): float32 nodes AutoCast {sorted(their_f32)} / trtcheck {sorted(my_f32)}"
            f"{' (same)' if their_f32 == my_f32 else ''}; values typed differently: {len(differ)} {differ[:6]}; Casts "
            f"{casts['AutoCast']} / {casts['trtcheck']}; doc_strings kept {kept_docs['AutoCast']} / {kept_docs['trtcheck']} of "
            f"{sum(1 for d in docs.values() if d)}; opset {theirs.opset_import[0].version} / {mine.opset_import[0].version}; "
            f"{their_seconds:.2f} s / {my_seconds:.3f} s; largest output difference {difference}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,hf_bert")
    parser.add_argument("--keep-op", action="append", default=[], choices=sorted(_ATEN_OF), help="an ONNX op both keep in float32")
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    torch.manual_seed(0)
    for name in args.models.split(","):
        for line in compare(name.strip(), args.keep_op):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
