"""The mixed-precision graph: what TensorRT 11 builds for ``precision="fp16"``/``"bf16"``, and ONNX Runtime runs.

TensorRT 11 is strongly typed only, so a reduced precision is the ONNX model's own types (``compiler.mixed_precision``,
a compile step: ``engine_build`` makes each segment's finished graph once, before its engine is built): float
tensors between nodes and weights in the low type, Casts at the engine's float32 boundaries, the nodes kept in float32
(``fp32_nodes``, ``autocast``, trtcheck's rules) with Casts around them, ``use_fp32_acc`` MatMuls in float32 on rounded
inputs. These tests check the graph itself (types, names, Casts), and that both backends take that one graph.
"""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import trtcheck
from trtcheck import Settings
from trtcheck.compiler.engine_build import build_segment_engine
from trtcheck.compiler.mixed_precision import precision_graph, to_mixed_precision
from trtcheck.engines import TensorSpec
from trtcheck.engines.emulation import emulate
from trtcheck.names import resolve_fp32_nodes
from trtcheck.onnx_format.weights import weight_placeholder
from trtcheck.settings import Autocast

F32, F16, BF16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT64


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, list(shape))


def origin(fx: str, target: str) -> str:
    return f"%{fx} ({target}), converter tests"


def node(op, inputs, outputs, fx, target="aten.x.default", **attributes):
    """An ONNX node named and documented as trtcheck's converters name them (``fx/Op``, its origin in doc_string)."""
    return helper.make_node(op, inputs, outputs, name=f"{fx}/{op}", doc_string=origin(fx, target), **attributes)


def model_of(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "segment", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def types_of(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    found = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    found.update({i.name: i.data_type for i in inferred.initializer})
    return found


def compute_types(model: onnx.ModelProto) -> dict[str, set[int]]:
    """Each non-Cast node's float types (its inputs and outputs), by name."""
    types = types_of(model)
    floats = {F32, F16, BF16}
    return {n.name: {types[v] for v in [*n.input, *n.output] if types.get(v) in floats} for n in model.graph.node if n.op_type != "Cast"}


def run(model, **feeds):
    """``model`` on ONNX Runtime as its engine runs it (low-precision values emulated in float32, rounded after each node)."""
    session = ort.InferenceSession(emulate(model)[0].SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feeds.items()})


W = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def linear_gelu():
    """x @ w + b, an Erf, a Mul: the shape of a transformer's MLP; every node named and documented."""
    nodes = [
        node("MatMul", ["x", "w"], ["mm"], "mm", "aten.mm.default"),
        node("Add", ["mm", "b"], ["add"], "add", "aten.add.Tensor"),
        node("Erf", ["add"], ["erf"], "erf", "aten.erf.default"),
        node("Mul", ["erf", "add"], ["y"], "mul", "aten.mul.Tensor"),
    ]
    inits = [numpy_helper.from_array(W.numpy(), "w"), numpy_helper.from_array(torch.ones(4).numpy() * 0.5, "b")]
    return model_of(nodes, [vi("x", F32, (2, 4))], [vi("y", F32, (2, 4))], inits)


@pytest.mark.parametrize(("precision", "low"), [("fp16", F16), ("bf16", BF16)])
def test_every_node_computes_in_the_low_type_between_float32_boundaries(linear_gelu, precision, low):
    mixed = to_mixed_precision(linear_gelu, precision)
    out = mixed.model
    assert compute_types(out) == {"mm/MatMul": {low}, "add/Add": {low}, "erf/Erf": {low}, "mul/Mul": {low}}
    assert [v.type.tensor_type.elem_type for v in [*out.graph.input, *out.graph.output]] == [F32, F32]  # keep_io_types
    assert {i.name: i.data_type for i in out.graph.initializer} == {"w": low, "b": low}  # weights converted once
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert [(c.input[0], c.output[0]) for c in casts] == [("x", f"x__{precision}"), (f"y__{precision}", "y")]
    assert all("trtcheck.compiler.mixed_precision" in c.doc_string for c in casts)
    originals = {n.name: n.doc_string for n in linear_gelu.graph.node}
    assert {n.name: n.doc_string for n in out.graph.node if n.op_type != "Cast"} == originals  # names and origins kept
    assert mixed.kept == {}
    onnx.checker.check_model(out, full_check=True) if precision == "fp16" else None  # opset 19 schemas know no bf16 MatMul


def test_onnx_runtime_computes_the_graph_like_eager_in_fp16(linear_gelu):
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    (y,) = run(to_mixed_precision(linear_gelu, "fp16").model, x=x)
    h = x.half() @ W.half() + torch.full((4,), 0.5).half()
    expected = (torch.erf(h.float()).half() * h).float()
    torch.testing.assert_close(torch.from_numpy(y), expected, rtol=0, atol=0)


def test_fp32_nodes_stay_float32_with_casts_around_them(linear_gelu):
    mixed = to_mixed_precision(linear_gelu, "fp16", keep=resolve_fp32_nodes(["erf"]))
    assert compute_types(mixed.model) == {"mm/MatMul": {F16}, "add/Add": {F16}, "erf/Erf": {F32}, "mul/Mul": {F16}}
    assert mixed.kept == {"erf/Erf": "Settings.fp32_nodes"}
    (erf,) = [n for n in mixed.model.graph.node if n.name == "erf/Erf"]
    assert erf.input[0] == "add__fp32" and erf.output[0] == "erf"  # reads a Cast of the fp16 value, makes float32
    (down,) = [n for n in mixed.model.graph.node if n.op_type == "Cast" and n.input[0] == "erf"]
    assert down.output[0] == "erf__fp16" and "a low-precision node reads it" in down.doc_string


def test_a_weight_a_float32_node_reads_stays_float32():
    """w feeds a kept MatMul and a low Add: it stays float32 (the kept node reads it as given) and the Add reads a Cast."""
    nodes = [node("MatMul", ["x", "w"], ["mm"], "mm", "aten.mm.default"), node("Add", ["mm", "w"], ["y"], "add", "aten.add.Tensor")]
    model = model_of(nodes, [vi("x", F32, (4, 4))], [vi("y", F32, (4, 4))], [numpy_helper.from_array(W.numpy(), "w")])
    mixed = to_mixed_precision(model, "fp16", keep=resolve_fp32_nodes(["aten.mm.default"]))
    assert {i.name: i.data_type for i in mixed.model.graph.initializer} == {"w": F32}
    (add,) = [n for n in mixed.model.graph.node if n.name == "add/Add"]
    assert add.input[1] == "w__fp16"
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    (y,) = run(mixed.model, x=x)
    torch.testing.assert_close(torch.from_numpy(y), ((x @ W).half() + W.half()).float(), rtol=0, atol=0)


def test_ops_tensorrt_has_no_low_precision_kernel_for_stay_float32():
    """Range has no FLOAT16 in TensorRT's ONNX parser's table: it stays float32, and says why."""
    nodes = [node("Range", ["start", "limit", "delta"], ["r"], "arange", "aten.arange.start_step"),
             node("Mul", ["r", "x"], ["y"], "mul", "aten.mul.Tensor")]
    scalars = [helper.make_tensor(n, F32, [], [v]) for n, v in (("start", 0.0), ("limit", 4.0), ("delta", 1.0))]
    model = model_of(nodes, [vi("x", F32, (4,))], [vi("y", F32, (4,))], scalars)
    mixed = to_mixed_precision(model, "fp16")
    assert compute_types(mixed.model) == {"arange/Range": {F32}, "mul/Mul": {F16}}
    assert "TensorRT's ONNX parser takes no FLOAT16 Range" in mixed.kept["arange/Range"]
    assert {i.name: i.data_type for i in mixed.model.graph.initializer} == {"start": F32, "limit": F32, "delta": F32}


def test_inputs_a_schema_fixes_to_float32_stay_float32_in_a_low_node():
    """Resize's scales are tensor(float) whatever X is: X goes fp16, the scales stay float32."""
    scales = numpy_helper.from_array(torch.tensor([1.0, 1.0, 2.0, 2.0]).numpy(), "scales")
    roi = numpy_helper.from_array(torch.zeros(0).numpy(), "roi")
    nodes = [node("Resize", ["x", "roi", "scales"], ["y"], "upsample", "aten.upsample_nearest2d.vec", mode="nearest")]
    model = model_of(nodes, [vi("x", F32, (1, 1, 2, 2))], [vi("y", F32, (1, 1, 4, 4))], [roi, scales])
    out = to_mixed_precision(model, "fp16").model
    types = types_of(out)
    (resize,) = [n for n in out.graph.node if n.op_type == "Resize"]
    assert [types[i] for i in resize.input] == [F16, F16, F32] and types[resize.output[0]] == F16
    onnx.checker.check_model(out, full_check=True)


def test_use_fp32_acc_multiplies_rounded_inputs_in_float32(linear_gelu):
    """Torch-TensorRT's use_fp32_acc: the MatMul reads its fp16-rounded inputs as float32, sums in float32, and its
    result is cast to fp16 under its own name; the rest of the graph is fp16."""
    mixed = to_mixed_precision(linear_gelu, "fp16", fp32_accumulation=True)
    assert compute_types(mixed.model) == {"mm/MatMul": {F32}, "add/Add": {F16}, "erf/Erf": {F16}, "mul/Mul": {F16}}
    (mm,) = [n for n in mixed.model.graph.node if n.name == "mm/MatMul"]
    assert list(mm.input) == ["x__fp16__fp32", "w__fp32"] and list(mm.output) == ["mm__fp32_acc"]
    assert {i.name: i.data_type for i in mixed.model.graph.initializer}["w"] == F16  # rounded once, read widened
    (down,) = [n for n in mixed.model.graph.node if n.op_type == "Cast" and n.input[0] == "mm__fp32_acc"]
    assert down.output[0] == "mm" and "accumulated in float32" in down.doc_string
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    (y,) = run(mixed.model, x=x)
    h = (x.half().float() @ W.half().float()).half() + torch.full((4,), 0.5).half()
    torch.testing.assert_close(torch.from_numpy(y), (torch.erf(h.float()).half() * h).float(), rtol=0, atol=0)


def test_attributes_that_make_float32_values_are_retargeted():
    """Cast(to=FLOAT) of an int, a Constant, a ConstantOfShape without a value (float32 zeros): all made fp16."""
    nodes = [
        node("Cast", ["i"], ["f"], "to", "aten._to_copy.default", to=F32),
        node("Constant", [], ["k"], "k", "aten.scalar_tensor.default", value=helper.make_tensor("v", F32, [], [3.0])),
        node("Shape", ["i"], ["shape"], "shape", "aten.sym_size.int"),
        node("ConstantOfShape", ["shape"], ["zeros"], "zeros", "aten.zeros.default"),
        node("Mul", ["f", "k"], ["m"], "mul", "aten.mul.Tensor"),
        node("Add", ["m", "zeros"], ["y"], "add", "aten.add.Tensor"),
    ]
    model = model_of(nodes, [vi("i", I64, (3,))], [vi("y", F32, (3,))])
    out = to_mixed_precision(model, "fp16").model
    types = types_of(out)
    assert types["f"] == types["k"] == types["zeros"] == types["m"] == F16 and types["y"] == F32
    onnx.checker.check_model(out, full_check=True)
    (y,) = run(out, i=torch.tensor([1, 2, 70000]))
    assert y.tolist() == [3.0, 6.0, float("inf")]  # 70000 is inf in fp16 already


def test_weights_beyond_fp16s_range_are_clamped_as_autocast_clamps_them():
    """A mask constant of finfo(float32).min and a 1e5 weight become -+65504 in fp16 (AutoCast's and TensorRT 10's FP16
    weight conversion), infinities stay infinite; bf16 has float32's range: nothing to clamp."""
    values = torch.tensor([1e5, -3.4e38, float("-inf"), 1.0])
    nodes = [node("Add", ["x", "w"], ["y"], "add", "aten.add.Tensor")]
    model = model_of(nodes, [vi("x", F32, (4,))], [vi("y", F32, (4,))], [numpy_helper.from_array(values.numpy(), "w")])
    (w,) = to_mixed_precision(model, "fp16").model.graph.initializer
    assert numpy_helper.to_array(w).astype("float32").tolist() == [65504.0, -65504.0, float("-inf"), 1.0]
    (w,) = to_mixed_precision(model, "bf16").model.graph.initializer
    assert torch.frombuffer(bytearray(w.raw_data), dtype=torch.bfloat16).float().tolist() == values.bfloat16().float().tolist()


def test_a_weight_held_by_reference_is_converted_in_the_mapping():
    x, y = TensorSpec("x", (4, 4), torch.float32), TensorSpec("y", (4, 4), torch.float32)
    graph = helper.make_graph([node("MatMul", ["x", "w"], ["y"], "mm", "aten.mm.default")], "segment",
                              [vi("x", F32, (4, 4))], [vi("y", F32, (4, 4))], [weight_placeholder("w", W)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    weights = {"w": W}
    mixed = to_mixed_precision(model, "fp16", weights)
    assert mixed.weights["w"].dtype == torch.float16 and torch.equal(mixed.weights["w"], W.half())
    assert weights["w"] is W and W.dtype == torch.float32  # the caller's mapping and tensor are not changed
    (placeholder,) = mixed.model.graph.initializer
    assert placeholder.data_type == F16 and placeholder.data_location == TensorProto.EXTERNAL and not placeholder.raw_data
    engine = build_segment_engine(model, [x], [y], backend="onnxruntime", settings=Settings(precision="fp16"), weights=weights)
    a = torch.randn(4, 4)
    torch.testing.assert_close(engine(a)[0], (a.half() @ W.half()).float(), rtol=0, atol=0)


def test_a_subgraph_node_stays_float32_and_the_values_it_captures_keep_their_type():
    """An If's branches are not rewritten: it stays float32, and the outer value its branch reads by name (``h``) keeps
    its name and float32 type although a low node makes it."""
    branch = helper.make_graph([helper.make_node("Neg", ["h"], ["out"], name="neg")], "branch", [], [vi("out", F32, (2,))])
    nodes = [
        node("Relu", ["x"], ["h"], "relu", "aten.relu.default"),
        node("ReduceSum", ["h"], ["s"], "sum", "aten.sum.default", keepdims=0),
        node("Greater", ["s", "zero"], ["c"], "gt", "aten.gt.Scalar"),
        node("If", ["c"], ["y"], "cond", "cond", then_branch=branch, else_branch=branch),
    ]
    model = model_of(nodes, [vi("x", F32, (2,))], [vi("y", F32, (2,))], [helper.make_tensor("zero", F32, [], [0.0])])
    mixed = to_mixed_precision(model, "fp16")
    assert "its subgraph (If) is not rewritten" in mixed.kept["cond/If"]
    types = types_of(mixed.model)
    assert types["h"] == F32 and types["h__fp16"] == F16 and types["s"] == F16
    (y,) = run(mixed.model, x=torch.tensor([1.0, -2.0]))
    assert y.tolist() == [-1.0, -0.0]


def test_names_are_deterministic_and_unique(linear_gelu):
    first = to_mixed_precision(linear_gelu, "fp16", keep=resolve_fp32_nodes(["erf"]), fp32_accumulation=True).model
    second = to_mixed_precision(linear_gelu, "fp16", keep=resolve_fp32_nodes(["erf"]), fp32_accumulation=True).model
    assert first.SerializeToString() == second.SerializeToString()
    names = [n.name for n in first.graph.node]
    outputs = [o for n in first.graph.node for o in n.output]
    assert len(set(names)) == len(names) and len(set(outputs)) == len(outputs)
    onnx.checker.check_model(first, full_check=True)


def test_fp32_leaves_the_model_alone(linear_gelu):
    model, weights = precision_graph(linear_gelu, Settings())
    assert model is linear_gelu and weights is None


# -- Torch-TensorRT's Autocast rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        (Autocast(), set()),  # its defaults with no calibration data keep nothing, as Torch-TensorRT's do
        (Autocast(excluded_nodes=("^er",)), {"erf/Erf"}),
        (Autocast(excluded_ops=("torch.ops.aten.add.Tensor",)), {"add/Add"}),
        (Autocast(excluded_ops=("aten::erf",)), {"erf/Erf"}),
        (Autocast(calibration={"add": 600.0, "mm": 10.0}), {"add/Add", "erf/Erf", "mul/Mul"}),  # add's readers and add
        (Autocast(calibration={"add": 600.0}, max_output_threshold=1000.0), set()),
        (Autocast(max_depth_of_reduction=3), {"mm/MatMul"}),  # mm reduces over 4
        (Autocast(max_depth_of_reduction=4), set()),
    ],
    ids=["defaults", "node regex", "op (torch.ops spelling)", "op packet", "output threshold", "threshold above", "depth", "depth at"],
)
def test_autocast_rules_keep_what_torch_tensorrts_keep(linear_gelu, policy, kept):
    mixed = to_mixed_precision(linear_gelu, "fp16", autocast=policy)
    assert set(mixed.kept) == kept
    assert all(why.startswith("Autocast: ") for why in mixed.kept.values())
    assert {name for name, types in compute_types(mixed.model).items() if types == {F32}} == kept


def test_autocast_through_settings_reaches_both_backends(linear_gelu):
    settings = Settings(precision="fp16", autocast=Autocast(excluded_nodes=("erf",)))
    model, _ = precision_graph(linear_gelu, settings)
    assert compute_types(model)["erf/Erf"] == {F32}
    assert precision_graph(linear_gelu, Settings(precision="fp16", autocast="torch_tensorrt"))[0].SerializeToString() == (
        to_mixed_precision(linear_gelu, "fp16").model.SerializeToString())


# -- the zoo's segments -------------------------------------------------------------------------------------------


class Block(torch.nn.Module):
    """LayerNorm, attention-like softmax, a conv and a linear: the converters' common ops in one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.norm = torch.nn.LayerNorm(16)
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(2)  # (N, 4, 16)
        h = self.norm(h)
        scores = (h @ h.transpose(1, 2)).softmax(-1)
        return self.linear(scores @ h).mean(1)


def test_a_converted_model_compiles_and_verifies_in_fp16_without_fallbacks():
    torch.manual_seed(0)
    model, x = Block().eval(), (torch.randn(2, 3, 4, 4),)
    compiled = trtcheck.compile(model, x, Settings(min_block_size=1, precision="fp16"), backend="onnxruntime")
    assert compiled.partition.fallbacks == [] and compiled.partition.summary().startswith("1 segment: 1 TensorRT")
    trtcheck.verify(model, x, Settings(min_block_size=1, precision="fp16"), backend="onnxruntime")


def test_a_float32_value_handed_out_through_an_identity_is_not_rounded():
    """An engine's outputs are Identities of the values it returns (trtcheck's converters name them ``output/...``).
    An Identity computes nothing, so a kept node's float32 result (and an engine input handed straight out) leaves in
    float32: before, the Identity ran in the low type and cast the kept ``div`` down and up on its way out, so the zoo's
    ``seed_lgamma`` with ``fp32_nodes=["div"]`` at bf16 still fed lgamma a value rounded onto its pole (-68.8 -> -69)."""
    model = model_of(
        [node("Add", ["x", "y"], ["a"], "add"), node("Div", ["x", "y"], ["d"], "div"),
         node("Identity", ["a"], ["out_a"], "output"), node("Identity", ["d"], ["out_d"], "output_1"),
         node("Identity", ["x"], ["out_x"], "output_2")],
        [vi("x", F32, [4]), vi("y", F32, [4])], [vi("out_a", F32, [4]), vi("out_d", F32, [4]), vi("out_x", F32, [4])],
    )
    mixed = to_mixed_precision(model, "fp16", keep=resolve_fp32_nodes(["div"]))  # fp16: ONNX Runtime's CPU has its Add
    types = compute_types(mixed.model)
    assert types["div/Div"] == {F32} and types["output_1/Identity"] == {F32}, types
    assert types["output_2/Identity"] == {F32}, types  # an input handed straight out
    assert types["add/Add"] == {F16}, types  # the rest is still low
    casts = [n for n in mixed.model.graph.node if n.op_type == "Cast"]
    assert all(n.input[0] != "d" for n in casts), [(n.input, n.output) for n in casts]  # d is read in float32 only
    x = torch.tensor([0.5186368, 1.0, 2.0, 3.0])
    y = torch.tensor([-0.0075373, 3.0, 7.0, 9.0])
    session = ort.InferenceSession(mixed.model.SerializeToString(), providers=["CPUExecutionProvider"])
    _, d, _ = session.run(None, {"x": x.numpy(), "y": y.numpy()})
    torch.testing.assert_close(torch.from_numpy(d), x / y, rtol=0, atol=0)  # float32's quotient, -68.809..., not fp16's -68.8125


@pytest.mark.slow
def test_seed_lgamma_verifies_at_bf16_with_the_division_in_float32():
    import trtcheck_zoo

    entry = trtcheck_zoo.get("seed_lgamma")
    model, inputs = entry.build()
    trtcheck.verify(model, inputs, Settings(min_block_size=1, precision="bf16", fp32_nodes=["div"]), backend="onnxruntime",
                    localize_budget=0)
