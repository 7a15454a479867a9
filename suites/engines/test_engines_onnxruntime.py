"""The ONNX Runtime engine computes what torch computes, without surprises at the boundary."""

from __future__ import annotations

import concurrent.futures
import platform
import tempfile

import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from trtcheck.engines import EngineBuildError, OnnxRuntimeEngine, TensorSpec, build_engine
from trtcheck.engines import onnxruntime as ort_engine
from trtcheck.engines.base import onnx_elem_type
from trtcheck.engines.onnxruntime import session_options
from trtcheck.onnx_format.weights import weight_placeholder


def spec(name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> TensorSpec:
    return TensorSpec(name, shape, dtype)


def binary_engine(make_model, op: str, a: TensorSpec, b: TensorSpec, out: TensorSpec) -> OnnxRuntimeEngine:
    model = make_model([helper.make_node(op, [a.name, b.name], [out.name])], [a, b], [out])
    return build_engine(model, [a, b], [out], backend="onnxruntime")


@pytest.mark.parametrize(
    ("op", "fn", "dtype"),
    [
        ("Add", torch.add, torch.float32),
        ("Add", torch.add, torch.float16),
        ("Add", torch.add, torch.int64),
        ("Mul", torch.mul, torch.int32),
        ("Sub", torch.sub, torch.float32),
        ("And", torch.logical_and, torch.bool),
        ("Or", torch.logical_or, torch.bool),
    ],
)
def test_elementwise_matches_torch(make_model, op, fn, dtype):
    engine = binary_engine(make_model, op, spec("x", (2, 3), dtype), spec("y", (2, 3), dtype), spec("z", (2, 3), dtype))
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 5, (2, 3), generator=gen).to(dtype) for _ in range(2))
    (z,) = engine(x, y)
    assert z.dtype == dtype
    torch.testing.assert_close(z, fn(x, y))


def test_matmul_matches_torch(make_model):
    engine = binary_engine(make_model, "MatMul", spec("a", (4, 5)), spec("b", (5, 3)), spec("c", (4, 3)))
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    torch.testing.assert_close(engine(a, b)[0], a @ b)


def test_comparison_mixes_dtypes(make_model):
    """float in, bool out: the output buffer is allocated with the output spec's dtype."""
    engine = binary_engine(make_model, "Greater", spec("x", (6,)), spec("y", (6,)), spec("gt", (6,), torch.bool))
    x, y = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(engine(x, y)[0], x > y)


def test_identity_bfloat16_and_scalar(make_model):
    specs_in = [spec("b", (3,), torch.bfloat16), spec("s", (), torch.float32)]
    specs_out = [spec("b_out", (3,), torch.bfloat16), spec("s_out", (), torch.float32)]
    nodes = [helper.make_node("Identity", ["b"], ["b_out"]), helper.make_node("Identity", ["s"], ["s_out"])]
    engine = build_engine(make_model(nodes, specs_in, specs_out), specs_in, specs_out, backend="onnxruntime")
    b, s = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16), torch.tensor(7.0)
    b_out, s_out = engine(b, s)
    assert torch.equal(b_out, b) and b_out.dtype == torch.bfloat16
    assert torch.equal(s_out, s) and s_out.shape == ()


def test_multiple_outputs_in_spec_order(make_model):
    x, y = spec("x", (3,)), spec("y", (3,))
    outs = [spec("prod", (3,)), spec("total", (3,))]  # deliberately not the graph's output order
    nodes = [helper.make_node("Add", ["x", "y"], ["total"]), helper.make_node("Mul", ["x", "y"], ["prod"])]
    model = make_model(nodes, [x, y], [outs[1], outs[0]])
    engine = build_engine(model, [x, y], outs, backend="onnxruntime")
    a, b = torch.randn(3), torch.randn(3)
    prod, total = engine(a, b)
    torch.testing.assert_close(prod, a * b)
    torch.testing.assert_close(total, a + b)


def test_non_contiguous_input(make_model):
    engine = binary_engine(make_model, "Add", spec("x", (3, 4)), spec("y", (3, 4)), spec("z", (3, 4)))
    x = torch.randn(4, 3).t()  # a transposed view: same shape, not contiguous
    y = torch.randn(3, 8)[:, ::2]  # a strided slice
    assert not x.is_contiguous() and not y.is_contiguous()
    torch.testing.assert_close(engine(x, y)[0], x + y)


def test_zero_size_and_dynamic_outputs(make_model):
    x, y = spec("x", (0, 3)), spec("y", (0, 3))
    model = make_model([helper.make_node("Add", ["x", "y"], ["z"])], [x, y], [spec("z", (0, 3))])
    for out_spec in (spec("z", (0, 3)), spec("z", (-1, 3))):
        engine = build_engine(model, [x, y], [out_spec], backend="onnxruntime")
        (z,) = engine(torch.empty(0, 3), torch.empty(0, 3))
        assert z.shape == (0, 3)


def test_dynamic_output_is_fetched_from_ort(make_model):
    """An output spec with an unknown dim is allocated by ORT and handed over via DLPack."""
    x, y = spec("x", (2, 3)), spec("y", (2, 3))
    model = make_model([helper.make_node("Add", ["x", "y"], ["z"])], [x, y], [spec("z", (-1, 3))])
    engine = build_engine(model, [x, y], [spec("z", (-1, 3))], backend="onnxruntime")
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    first = engine(a, b)[0]
    second = engine(a, b)[0]
    torch.testing.assert_close(first, a + b)
    assert first.data_ptr() != second.data_ptr()


@pytest.fixture
def add_engine(make_model) -> OnnxRuntimeEngine:
    return binary_engine(make_model, "Add", spec("x", (2, 3)), spec("y", (2, 3)), spec("z", (2, 3)))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.randn(2, 3),), r"expects 2 input\(s\) \(x, y\), got 1"),
        ((torch.randn(2, 3),) * 3, r"expects 2 input\(s\) \(x, y\), got 3"),
        ((torch.randn(2, 3), torch.randn(3, 2)), r"input 'y': expected shape \(2, 3\), got \(3, 2\)"),
        ((torch.randn(2, 3, 1), torch.randn(2, 3)), r"input 'x': expected shape \(2, 3\), got \(2, 3, 1\)"),
        ((torch.randn(2, 3).double(), torch.randn(2, 3)), r"input 'x': expected dtype torch.float32, got torch.float64"),
        ((torch.randn(2, 3), [[0.0] * 3] * 2), r"input 'y': expected a torch.Tensor, got list"),
    ],
)
def test_wrong_inputs_raise_value_error(add_engine, args, match):
    with pytest.raises(ValueError, match=match):
        add_engine(*args)


def test_outputs_are_fresh_each_call(make_model):
    x, y = spec("x", (4,)), spec("y", (4,))
    outs = [spec("s", (4,)), spec("d", (4,))]
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Sub", ["x", "y"], ["d"])]
    engine = build_engine(make_model(nodes, [x, y], outs), [x, y], outs, backend="onnxruntime")
    a, b = torch.randn(4), torch.randn(4)
    first = engine(a, b)
    kept = [t.clone() for t in first]
    second = engine(a, b)
    pointers = {t.data_ptr() for t in (*first, *second)}
    assert len(pointers) == 4, "outputs alias each other within or across calls"
    first[0].fill_(123.0)  # mutating one call's result must not leak into another's
    torch.testing.assert_close(second[0], kept[0])
    assert first[0].data_ptr() not in (a.data_ptr(), b.data_ptr())


def test_identity_output_does_not_alias_input(make_model):
    x = spec("x", (5,))
    engine = build_engine(
        make_model([helper.make_node("Identity", ["x"], ["y"])], [x], [spec("y", (5,))]),
        [x], [spec("y", (5,))], backend="onnxruntime",
    )
    a = torch.randn(5)
    (b,) = engine(a)
    b.add_(1.0)
    assert not torch.equal(a, b)


def test_thread_count_follows_torch(make_model, monkeypatch):
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        engine = binary_engine(make_model, "Add", spec("x", (1,)), spec("y", (1,)), spec("z", (1,)))
        assert engine.session.get_session_options().intra_op_num_threads == 1
    finally:
        torch.set_num_threads(previous)
    engine = binary_engine(make_model, "Add", spec("x", (1,)), spec("y", (1,)), spec("z", (1,)))
    options = engine.session.get_session_options()
    assert options.intra_op_num_threads == torch.get_num_threads()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert engine.session.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.parametrize(
    ("inputs", "outputs", "match"),
    [
        ([spec("x", (2,)), spec("w", (2,))], [spec("z", (2,))], r"graph inputs \['x', 'y'\] do not match"),
        ([spec("x", (2,)), spec("y", (2,))], [spec("out", (2,))], r"graph outputs \['z'\] do not match"),
        ([spec("x", (2,), torch.float16), spec("y", (2,))], [spec("z", (2,))], r"input 'x' is FLOAT .*spec says torch.float16"),
        ([spec("x", (2,)), spec("y", (2,))], [spec("z", (3,))], r"output 'z' has shape \(2,\) .* \(3,\)"),
        ([spec("x", (2,)), spec("y", (2,))], [spec("z", (2,), torch.complex64)], r"complex64 cannot cross"),
    ],
)
def test_spec_mismatch_is_a_build_error(make_model, inputs, outputs, match):
    node = helper.make_node("Add", ["x", "y"], ["z"])
    model = make_model([node], [spec("x", (2,)), spec("y", (2,))], [spec("z", (2,))])
    with pytest.raises(EngineBuildError, match=match):
        build_engine(model, inputs, outputs, backend="onnxruntime")


def test_invalid_model_is_a_build_error(make_model):
    x, z = spec("x", (2,)), spec("z", (2,))
    model = make_model([helper.make_node("Identity", ["x"], ["z"])], [x], [z])
    model.graph.node[0].op_type = "NoSuchOp"  # what a buggy converter might emit
    with pytest.raises(EngineBuildError, match=r"onnxruntime: could not create a session.*check_model"):
        build_engine(model, [x], [z], backend="onnxruntime")


_DTYPES = [torch.float32, torch.float16, torch.int32, torch.int64]


# make_model is a stateless builder, so sharing it across hypothesis examples is fine. Example
# counts come from the repository's hypothesis profile (conftest.py).
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    dtype=st.sampled_from(_DTYPES),
    seed=st.integers(0, 2**16),
)
def test_add_matches_torch_for_any_shape_and_dtype(make_model, shape, dtype, seed):
    engine = binary_engine(make_model, "Add", spec("x", shape, dtype), spec("y", shape, dtype), spec("z", shape, dtype))
    gen = torch.Generator().manual_seed(seed)
    a, b = (torch.randint(-50, 50, shape, generator=gen).to(dtype) for _ in range(2))
    torch.testing.assert_close(engine(a, b)[0], a + b)


def test_mixed_static_and_dynamic_outputs_keep_spec_order(make_model):
    x, y = spec("x", (3,)), spec("y", (3,))
    graph_outs = [spec("total", (3,)), spec("prod", (3,))]
    call_outs = [spec("prod", (-1,)), spec("total", (3,))]
    nodes = [helper.make_node("Add", ["x", "y"], ["total"]), helper.make_node("Mul", ["x", "y"], ["prod"])]
    engine = build_engine(make_model(nodes, [x, y], graph_outs), [x, y], call_outs, backend="onnxruntime")
    a, b = torch.randn(3), torch.randn(3)
    prod, total = engine(a, b)
    torch.testing.assert_close(prod, a * b)
    torch.testing.assert_close(total, a + b)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="ONNX Runtime's NCHWc kernels are x86 (MLAS)")
def test_convolutions_run_in_onnx_runtime_nchwc_layout(make_model, tmp_path):
    """The engines keep ONNX Runtime's NCHWc layout transformer (issue 10): without it resnet18's convolutions
    ran about twice as long, which the reorder in and out of every small engine (~2.3 ms over 18 engines)
    does not outweigh. Checked on the model ONNX Runtime optimized with the engines' default options."""
    x, y = spec("x", (1, 16, 8, 8)), spec("y", (1, 16, 8, 8))
    weight = helper.make_tensor("w", onnx.TensorProto.FLOAT, (16, 16, 3, 3), [0.01] * (16 * 16 * 9))
    nodes = [helper.make_node("Constant", [], ["w"], value=weight), helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [x], [y])
    options = session_options()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    engine = OnnxRuntimeEngine(model, [x], [y], options=options)
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    assert [(n.op_type, n.domain) for n in optimized.graph.node] == [
        ("ReorderInput", "com.microsoft.nchwc"), ("Conv", "com.microsoft.nchwc"), ("ReorderOutput", "com.microsoft.nchwc")]
    a = torch.randn(1, 16, 8, 8)
    expected = torch.nn.functional.conv2d(a, torch.full((16, 16, 3, 3), 0.01), padding=1)
    torch.testing.assert_close(engine(a)[0], expected, rtol=1e-4, atol=1e-5)


def _relu_engine(make_model) -> OnnxRuntimeEngine:
    x, y = spec("x", (2, 3)), spec("y", (2, 3))
    return OnnxRuntimeEngine(make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]), [x], [y])


def test_cpu_calls_bind_through_onnx_runtime_pybind_binding_not_the_python_wrapper(make_model, monkeypatch):
    """Every engine crossing pays the call path: static outputs on the CPU skip ``onnxruntime.IOBinding``'s
    Python wrapper (about 4 of 14 us a call), and the ``run_times`` hook still times the run alone."""
    engine = _relu_engine(make_model)

    def wrapper_binding():
        raise AssertionError("the Python IOBinding wrapper was used")

    monkeypatch.setattr(engine.session, "io_binding", wrapper_binding)
    x = torch.randn(2, 3)
    (y,) = engine(x)
    torch.testing.assert_close(y, torch.relu(x))
    engine.run_times = []
    engine(x)
    assert len(engine.run_times) == 1 and engine.run_times[0] > 0


def _counting_bindings(engine: OnnxRuntimeEngine) -> list[int]:
    """Count the pybind bindings ``engine`` creates from now on."""
    created: list[int] = []
    new_binding, run, cpu = engine._direct
    engine._direct = (lambda: created.append(1) or new_binding()), run, cpu
    return created


def test_sequential_calls_reuse_one_binding_and_bind_each_calls_tensors(make_model):
    """Issue 42: a stitched module calls each engine once per crossing; the binding is made once, not per call, and
    every call still runs on its own inputs into its own fresh outputs."""
    engine = _relu_engine(make_model)
    created = _counting_bindings(engine)
    inputs = [torch.randn(2, 3) for _ in range(5)]
    outputs = [engine(x)[0] for x in inputs]
    assert created == [1]
    for x, y in zip(inputs, outputs):
        torch.testing.assert_close(y, torch.relu(x))
    assert len({y.data_ptr() for y in outputs}) == len(outputs)


def test_concurrent_calls_never_share_a_binding(make_model):
    """Calls from several threads each take their own binding (an idle one, or a new one): results never mix."""
    engine = _relu_engine(make_model)
    inputs = [torch.full((2, 3), float(i)) - 2.0 for i in range(64)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda x: engine(x)[0], inputs * 4))
    for x, y in zip(inputs * 4, results):
        torch.testing.assert_close(y, torch.relu(x))


@pytest.mark.parametrize(
    ("make_input", "error"),
    [
        (lambda: torch.randn(3, 2).t(), None),
        (lambda: torch.randn(2, 3, dtype=torch.float64), r"input 'x': expected dtype torch.float32, got torch.float64"),
        (lambda: torch.randn(3, 2), r"input 'x': expected shape \(2, 3\), got \(3, 2\)"),
    ],
    ids=["non-contiguous", "other dtype", "other shape"],
)
def test_inputs_the_cpu_fast_path_cannot_take_go_the_general_way(make_model, make_input, error):
    """The one-pass check of a CPU call (``_ready_on_cpu``) passes only what needs nothing done: a transposed input
    is made contiguous, a wrong dtype or shape is refused naming the input, as before the fast path."""
    engine = _relu_engine(make_model)
    x = make_input()
    if error is None:
        torch.testing.assert_close(engine(x)[0], torch.relu(x))
    else:
        with pytest.raises(ValueError, match=error):
            engine(x)


def test_engine_uses_the_public_binding_where_onnx_runtime_lacks_the_pybind_one(make_model, monkeypatch):
    monkeypatch.setattr("trtcheck.engines.onnxruntime._direct_binding", lambda session: None)
    engine = _relu_engine(make_model)
    calls = []
    public = engine.session.io_binding
    monkeypatch.setattr(engine.session, "io_binding", lambda: calls.append(1) or public())
    x = torch.randn(2, 3)
    torch.testing.assert_close(engine(x)[0], torch.relu(x))
    assert calls == [1]


# --- weights: in memory below WEIGHTS_FILE_BYTES, through an external-data file from it on (issue 25) ----------
def _weighted_model(weights: dict[str, torch.Tensor]) -> onnx.ModelProto:
    """z = (x @ w0) + w1 ... : every weight a placeholder (held by reference, as trtcheck's converters emit it)."""
    names = list(weights)
    nodes = [helper.make_node("MatMul", ["x", names[0]], ["h0"])]
    for i, name in enumerate(names[1:], 1):
        nodes.append(helper.make_node("Add", [f"h{i - 1}", name], [f"h{i}"]))
    nodes.append(helper.make_node("Identity", [f"h{len(names) - 1}"], ["z"]))
    elem = onnx_elem_type(weights[names[0]].dtype)
    inputs = [helper.make_tensor_value_info("x", elem, [2, weights[names[0]].shape[0]])]
    outputs = [helper.make_tensor_value_info("z", elem, [2, weights[names[0]].shape[1]])]
    graph = helper.make_graph(nodes, "segment", inputs, outputs, [weight_placeholder(n, t) for n, t in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])  # a placeholder has no data to check


@pytest.mark.parametrize("permuted", [False, True], ids=["contiguous", "permuted"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("file_bytes", [0, 1 << 40], ids=["file", "memory"])
def test_weights_reach_the_session_once_and_are_the_engines_own(monkeypatch, tmp_path, dtype, file_bytes, permuted):
    """The same engine whichever way its weights travel: its outputs are torch's, changing the tensors afterwards
    changes nothing, and the temporary folder of the file way is gone once the session exists. Three weights of odd
    sizes, so that offsets in the data file are aligned (a misaligned offset would still run: the values check it).
    ``permuted``: the first weight is a permuted view of a parameter (``ConversionContext.permuted_weight``), whose bytes
    are the view's, in its own order."""
    monkeypatch.setattr(ort_engine, "WEIGHTS_FILE_BYTES", file_bytes)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    saved = []
    original = ort_engine._weights_file
    monkeypatch.setattr(ort_engine, "_weights_file", lambda *a: saved.append(a[2]) or original(*a))
    g = torch.Generator().manual_seed(0)
    weights = {
        "w0": torch.randn(19, 37, generator=g).to(dtype).t() if permuted else torch.randn(37, 19, generator=g).to(dtype),
        "w1": torch.randn(19, generator=g).to(dtype),
        "w2": torch.randn(2, 19, generator=g).to(dtype),
    }
    expected_weights = {name: t.clone() for name, t in weights.items()}
    x = torch.randn(2, 37, generator=g).to(dtype)
    x_spec, z_spec = spec("x", (2, 37), dtype), spec("z", (2, 19), dtype)
    engine = build_engine(_weighted_model(weights), [x_spec], [z_spec], backend="onnxruntime", weights=weights)
    assert len(saved) == (1 if file_bytes == 0 else 0)
    assert list(tmp_path.iterdir()) == []  # the folder (model and weights.bin) is removed
    for tensor in weights.values():
        tensor.fill_(1000.0)  # the engine copied them
    expected = (x.float() @ expected_weights["w0"].float() + expected_weights["w1"].float() + expected_weights["w2"].float()).to(dtype)
    (out,) = engine(x)
    (again,) = engine(x)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.02}
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(again, out, atol=0, rtol=0)


def test_a_megabyte_of_weights_takes_the_file(monkeypatch):
    """At the real threshold: 1 MiB of weights goes through a file, a row less in memory."""
    saved = []
    original = ort_engine._weights_file
    monkeypatch.setattr(ort_engine, "_weights_file", lambda *a: saved.append(a[2]) or original(*a))
    for rows, through_file in ((512, True), (511, False)):
        w = torch.ones(rows, 512)  # 4 bytes x 512 x 512 = 1 MiB
        model = _weighted_model({"w": w})
        engine = build_engine(model, [spec("x", (2, rows))], [spec("z", (2, 512))], backend="onnxruntime", weights={"w": w})
        torch.testing.assert_close(engine(torch.ones(2, rows))[0], torch.full((2, 512), float(rows)))
        assert bool(saved) is through_file, rows
        saved.clear()
