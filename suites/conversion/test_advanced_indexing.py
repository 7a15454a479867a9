"""Advanced indexing (ops/indexing.py's ``aten.index.Tensor``, ops/scatter.py's ``aten.index_put``) and integer
``cumsum`` (ops/reduction.py) against eager PyTorch.

Each schema case of ``index.Tensor(self, indices)`` and ``index_put(self, indices, values, accumulate)``: one
index tensor or several, broadcast among themselves, adjacent (the index shape stays in place) or separated
by ``None`` (a full slice: the index shape goes to the front), 0-d index tensors, int32 and int64 positions,
negative positions, bool masks (a static result shape only), ``accumulate`` False and True, bool data. Then
a property test over random layouts, and the refusals with their reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import trtcheck
import trtcheck.conversion as converters
from suites.conversion.converter_harness import (
    Fn,
    bools,
    check,
    emitted_ops,
    randint,
    randn,
    run_onnx,
    tensorrt_type_violations,
)
from suites.conversion.dynamic_harness import export
from suites.conversion.family_harness import accepted, refused
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.ops.trt_onnx_ops import TENSORRT_ONNX_OPS

A = torch.ops.aten
F16 = torch.float16
I32 = torch.int32


def _ints(*values: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


# ---- index.Tensor -----------------------------------------------------------------------------------------

# (id, function, inputs): every function calls aten.index.Tensor itself.
INDEX_CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]] = [
    ("one-index-leading", lambda x, i: A.index.Tensor(x, [i]), lambda: (randn(6, 3), _ints(5, -6, 0))),
    ("two-leading-broadcast-negative", lambda x, i, j: A.index.Tensor(x, [i, j]),
     lambda: (randn(4, 5, 3), _ints([0], [-1], [2]), _ints(1, -5, 4, 0))),
    ("two-adjacent-middle", lambda x, i, j: A.index.Tensor(x, [None, i, j]),
     lambda: (randn(2, 4, 5, 3), _ints([[0]], [[3]]), _ints(4, -2, 1))),
    ("separated-index-shape-first", lambda x, i, j: A.index.Tensor(x, [i, None, j]),
     lambda: (randn(4, 3, 5), _ints([0], [-1], [2]), _ints(1, -5, 4, 0, dtype=I32))),
    ("separated-after-a-slice", lambda x, i, j: A.index.Tensor(x, [None, i, None, j]),
     lambda: (randn(2, 4, 3, 5), _ints(3, 0), _ints(-1, 2))),
    ("three-every-dim-int32", lambda x, i, j, k: A.index.Tensor(x, [i, j, k]),
     lambda: (randn(3, 4, 5), _ints(2, 0, dtype=I32), _ints([1], [3], dtype=I32), _ints(-1, 4, dtype=I32))),
    ("0d-indices-separated", lambda x, i, j: A.index.Tensor(x, [None, i, None, j]),
     lambda: (randn(2, 4, 3, 5), torch.tensor(3), torch.tensor(-1))),
    ("0d-and-1d-adjacent", lambda x, i, j: A.index.Tensor(x, [i, j]), lambda: (randn(4, 5, 2), torch.tensor(-2), _ints(0, 4, 4))),
    ("fewer-indices-than-dims-float16", lambda x, i, j: A.index.Tensor(x, [i, j]),
     lambda: (randn(3, 4, 2, 2, dtype=F16), _ints(2, 1), _ints(0, -1))),
    ("int64-data", lambda x, i, j: A.index.Tensor(x, [None, i, j]), lambda: (randint(2, 3, 4), _ints(2, 0), _ints(3, -4))),
    # The attention-mask construction of Hugging Face models: bool[2, 16] by int64[2, 1, 1, 1], int64[1, 1, 1, 16].
    ("bool-data-hf-mask", lambda m, b, s: A.index.Tensor(m, [b, s]),
     lambda: (bools(2, 16), torch.arange(2).view(2, 1, 1, 1), torch.arange(16).view(1, 1, 1, 16))),
]


@pytest.mark.parametrize("entry", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_index_tensor_matches_eager(entry) -> None:
    _, fn, inputs = entry
    check(fn, inputs(), targets=(A.index.Tensor,))


def check_lowered(fn: Callable[..., Any], args: Sequence[Any], target: Any) -> None:
    """``check`` on the graph trtcheck's lowering gives (its assertions, a ``torch._check``, dropped)."""
    gm = trtcheck.lower(Fn(fn).eval(), tuple(args))
    assert target in {n.target for n in gm.graph.nodes}
    model = segment_to_onnx(gm)
    assert not emitted_ops(model) - TENSORRT_ONNX_OPS
    assert not tensorrt_type_violations(model)
    with torch.no_grad():
        expected = fn(*args)
    (actual,) = run_onnx(model, gm, args)
    torch.testing.assert_close(torch.from_numpy(np.asarray(actual)), expected)


def _masked(position: int, count: int) -> Callable[..., Any]:
    """``x[(None,) * position + (mask,)]`` whose result size export knows: ``count`` True elements.

    The result goes through one more op (``logical_not``): the index node's own metadata keeps the size as a
    SymInt equal to ``count``, which the interpreter's output check reads as a symbolic dim ``'3'`` where ONNX
    infers 3 (``context._static_shape``); inside a segment the size is just a number.
    """

    def fn(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = A.index.Tensor(x, [None] * position + [mask])
        torch._check(y.shape[position] == count)
        return A.logical_not.default(y)

    return fn


@pytest.mark.parametrize(("position", "x", "mask"), [
    (0, randn(5, 3), _ints(True, False, True, True, False, dtype=torch.bool)),
    (1, randint(2, 2, 3, 4), torch.tensor([[True, False, True], [False, False, True]])),
    (2, bools(2, 3, 6), torch.tensor([False, True, False, False, True, True])),
], ids=["leading-1d", "2d-mask-after-slice-int64", "last-dim-bool-data"])
def test_bool_mask_with_a_static_result_shape(position, x, mask) -> None:
    check_lowered(_masked(position, int(mask.sum())), (x, mask), A.index.Tensor)


def _node(target: Any, self_meta: torch.Tensor, indices: Sequence[torch.Tensor | None], out_shape: Sequence[int],
          values: torch.Tensor | None = None) -> torch.fx.Node:
    """A graph with one ``target`` call on meta tensors, for layouts torch.export cannot capture."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = self_meta
    index_nodes: list[torch.fx.Node | None] = []
    for position, meta in enumerate(indices):
        node = None if meta is None else graph.placeholder(f"i{position}")
        if node is not None:
            node.meta["val"] = meta
        index_nodes.append(node)
    args: tuple[Any, ...] = (x, index_nodes)
    if values is not None:
        v = graph.placeholder("values")
        v.meta["val"] = values
        args = (*args, v)
    call = graph.call_function(target, args)
    call.meta["val"] = torch.empty(out_shape, dtype=self_meta.dtype, device="meta")
    graph.output(call)
    torch.fx.GraphModule(torch.nn.Module(), graph)
    return call


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _reason(node: torch.fx.Node) -> str:
    judged = converters.get(node.target).judge(node)
    assert judged.error is None and not judged.accepted, judged
    return judged.reason or ""


def test_index_tensor_refusals() -> None:
    mask, positions = _meta(4, dtype=torch.bool), _meta(3, dtype=torch.int64)
    # A mask whose count export does not know: unbacked, possibly 0 (the shared empty-output rule) ...
    assert "may be empty: a size of [u0, 3]" in refused(lambda x, m: A.index.Tensor(x, [m]),
                                                        (randn(5, 3), bools(5)), A.index.Tensor)

    def at_least_one(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        y = A.index.Tensor(x, [None, m])
        torch._check(y.shape[1] >= 1)
        return y

    # ... or at least 1: the mask's own reason.
    assert "indices[1] is a bool mask: the output's size at dim 1 is its number of True elements, known only at " \
           "run time (output shape [2, u0, 3])" in refused(at_least_one, (randn(2, 5, 3), bools(5)), A.index.Tensor)
    assert "indices[0] is a bool mask beside other index tensors" in _reason(
        _node(A.index.Tensor, _meta(4, 5), [mask, positions], [3]))
    assert "indices[0] is a 0-d bool mask" in _reason(
        _node(A.index.Tensor, _meta(4, 5), [_meta(dtype=torch.bool)], [1, 4, 5]))
    assert "ranked in float32, exact up to 16777216" in _reason(
        _node(A.index.Tensor, _meta(4097, 4097), [_meta(4097, 4097, dtype=torch.bool)], [3]))
    assert "TensorRT's TopK takes k <= 3840" in _reason(
        _node(A.index.Tensor, _meta(5000), [_meta(5000, dtype=torch.bool)], [3841]))
    assert "only full slices" in _reason(_node(A.index.Tensor, _meta(4, 5), [None, None], [4, 5]))
    # torch's meta function: with a 0-d last index tensor, the index shape [2] is missing from the metadata.
    assert "the output's metadata says [4] where PyTorch's indexing gives [2, 4]" in refused(
        lambda x, i, j: A.index.Tensor(x, [i, None, j]), (randn(3, 4, 5), _ints(0, 1), torch.tensor(0)), A.index.Tensor)
    assert accepted(lambda x, i, j: A.index.Tensor(x, [i, None, j]), (randn(3, 4, 5), _ints(0), _ints(1)),
                    A.index.Tensor)


# ---- index_put --------------------------------------------------------------------------------------------

PUT_CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]] = [
    ("slice-then-index", lambda x, i, v: A.index_put.default(x, [None, i], v),
     lambda: (randn(3, 5, 2), _ints(4, -1, 0), randn(3, 3, 2, seed=1))),
    ("slice-then-index-accumulate-repeats", lambda x, i, v: A.index_put.default(x, [None, i], v, True),
     lambda: (randn(3, 5, 2), _ints(4, 0, 0), randn(3, 3, 2, seed=1))),
    ("separated-values-broadcast", lambda x, i, j, v: A.index_put.default(x, [i, None, j], v),
     lambda: (randn(4, 3, 5), _ints([0], [-1], [2]), _ints(1, -5, 4, 0), randn(3, 4, 3, seed=1))),
    ("separated-accumulate-int64-scalar-rows", lambda x, i, j, v: A.index_put.default(x, [i, None, j], v, accumulate=True),
     lambda: (randint(4, 3, 5), _ints([0], [0]), _ints(1, 1, 2), randint(3, seed=1))),
    ("adjacent-middle-int32-positions", lambda x, i, j, v: A.index_put.default(x, [None, i, j], v),
     lambda: (randn(2, 4, 5, 3), _ints([0], [3], dtype=I32), _ints(1, -2, 4, dtype=I32), randn(2, 2, 3, 3, seed=1))),
    ("bool-data", lambda x, i, v: A.index_put.default(x, [i], v), lambda: (bools(4, 3), _ints(2, 0), bools(2, 3, seed=1))),
    ("bool-data-accumulate-is-or", lambda x, i, v: A.index_put.default(x, [i], v, True),
     lambda: (bools(4, 3), _ints(2, 2, 0), bools(3, 3, seed=1))),
    ("mask-rows", lambda x, m, v: A.index_put.default(x, [m], v),
     lambda: (randn(5, 5), _ints(True, False, True, True, False, dtype=torch.bool), randn(5, seed=1))),
    ("mask-after-slice-accumulate-float16", lambda x, m, v: A.index_put.default(x, [None, m], v, True),
     lambda: (randn(3, 2, 4, 2, dtype=F16), bools(2, 4), randn(3, 1, 2, dtype=F16, seed=1))),
    ("mask-bool-data-accumulate", lambda x, m, v: A.index_put.default(x, [m], v, True),
     lambda: (bools(5, 5), bools(5, seed=1), bools(5, seed=2))),
    ("mask-scalar-value-int64", lambda x, m, v: A.index_put.default(x, [m], v), lambda: (randint(3, 4), bools(3, 4), torch.tensor(7))),
]


@pytest.mark.parametrize("entry", PUT_CASES, ids=[c[0] for c in PUT_CASES])
def test_index_put_matches_eager(entry) -> None:
    _, fn, inputs = entry
    check(fn, inputs(), targets=(A.index_put.default,))


def test_index_put_refusals() -> None:
    x = randn(3, 4)
    assert "values [2, 4] has size 2 along the mask's selection: one value per True element" in refused(
        lambda x, m, v: A.index_put.default(x, [m], v), (x, _ints(True, False, True, dtype=torch.bool), randn(2, 4)),
        A.index_put.default)
    assert "indices[1] is a bool mask beside other index tensors" in _reason(
        _node(A.index_put.default, _meta(4, 5), [_meta(3, dtype=torch.int64), _meta(5, dtype=torch.bool)], [4, 5],
              values=_meta(1)))
    assert "indices[0] is a 0-d bool mask" in _reason(
        _node(A.index_put.default, _meta(4, 5), [_meta(dtype=torch.bool)], [4, 5], values=_meta(1)))
    assert "only full slices" in _reason(_node(A.index_put.default, _meta(4, 5), [None], [4, 5], values=_meta(1)))
    assert "accumulate=True on torch.float16" in refused(
        lambda x, i, v: A.index_put.default(x, [None, i], v, True),
        (randn(3, 4, dtype=F16), _ints(0, 0), randn(3, 2, dtype=F16)), A.index_put.default)
    assert accepted(lambda x, i, v: A.index_put.default(x, [None, i], v, True),
                    (randn(3, 4), _ints(0, 0), randn(3, 2)), A.index_put.default)


# ---- random layouts ---------------------------------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[int], list[int | None], list[tuple[int, ...]]]:
    """(self's shape, the indexed dims as positions into indices or None, the index tensors' shapes)."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    indexed = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)).filter(any))
    last = max(axis for axis, used in enumerate(indexed) if used)
    indexed = indexed[:last + 1]  # trailing full slices are left out, as PyTorch writes them
    count = sum(indexed)
    shapes = draw(mutually_broadcastable_shapes(num_shapes=count, min_dims=0, max_dims=3, max_side=3)).input_shapes
    return shape, [0 if used else None for used in indexed], list(shapes)


def _positions(shape: list[int], layout: list[int | None], shapes: list[tuple[int, ...]], dtype: torch.dtype,
               seed: int) -> list[torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    tensors = iter(shapes)
    return [None if used is None else torch.randint(-size, size, next(tensors), generator=generator, dtype=dtype)
            for size, used in zip(shape, layout)]


@given(layout=layouts(), dtype=st.sampled_from([torch.float32, F16, torch.int64, torch.bool]),
       index_dtype=st.sampled_from([torch.int64, I32]), seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_index_tensor_random_layouts(layout, dtype, index_dtype, seed) -> None:
    shape, used, shapes = layout
    indices = _positions(shape, used, shapes, index_dtype, seed)
    x = (torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 10).to(dtype)
    tensors = [i for i in indices if i is not None]

    def fn(x: torch.Tensor, *given: torch.Tensor) -> torch.Tensor:
        it = iter(given)
        return A.index.Tensor(x, [None if i is None else next(it) for i in indices])

    if shapes[-1] == () and torch.broadcast_shapes(*shapes) != ():  # torch's meta function gets the shape wrong
        assert "the output's metadata says" in refused(fn, (x, *tensors), A.index.Tensor)
        return
    check(fn, (x, *tensors), targets=(A.index.Tensor,))


@given(layout=layouts(), dtype=st.sampled_from([torch.float32, torch.int32, torch.int64, torch.bool]),
       accumulate=st.booleans(), seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_index_put_random_layouts(layout, dtype, accumulate, seed) -> None:
    """Values are another tensor read at the same positions, so a position written twice gets the same value
    twice (which write wins is unspecified); accumulating, integer-valued data make every order of sums exact."""
    shape, used, shapes = layout
    indices = _positions(shape, used, shapes, torch.int64, seed)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-5, 5, shape, generator=generator).to(dtype)
    source = torch.randint(-5, 5, shape, generator=generator).to(dtype)
    values = A.index.Tensor(source, indices)  # not source[...]: Python reads a 0-d index as an int
    tensors = [i for i in indices if i is not None]

    def fn(x: torch.Tensor, v: torch.Tensor, *given: torch.Tensor) -> torch.Tensor:
        it = iter(given)
        return A.index_put.default(x, [None if i is None else next(it) for i in indices], v, accumulate)

    check(fn, (x, values, *tensors), targets=(A.index_put.default,))


# ---- integer cumsum ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fn", "x"), [
    (lambda x: A.cumsum.default(x, 1), randint(2, 16, dtype=I32)),  # RoBERTa's position ids: int32 in, int64 out
    (lambda x: A.cumsum.default(x, 0), randint(37, 3, low=-2**40, high=2**40)),  # past float32's 2**24
    (lambda x: A.cumsum.default(x, -1), bools(3, 5)),
    (lambda x: A.cumsum.default(x, 0, dtype=I32), randint(5, 2, dtype=I32)),
    (lambda x: A.cumsum.default(x, 1), randint(3, 1)),
    (lambda x: A.cumsum.default(x, 0, dtype=torch.int64), randn(4, 3) * 5),
    (lambda x: A.cumsum.default(x, 0, dtype=torch.float32), randint(4, 3)),
], ids=["int32-to-int64", "int64-large", "bool", "dtype-int32", "length-1", "float-to-int64", "int-to-float32"])
def test_integer_cumsum_matches_eager(fn, x) -> None:
    check(fn, (x,), targets=(A.cumsum.default,))


def test_integer_cumsum_refuses_a_dynamic_axis() -> None:
    gm = export(lambda x: A.cumsum.default(x, 0), (randint(6, 3),), ({0: torch.export.Dim("n", min=2, max=16)},))
    node = next(n for n in gm.graph.nodes if n.target == A.cumsum.default)
    assert "self has the dynamic size s" in _reason(node)
    assert "an integer cumsum takes one step per power of two of it" in _reason(node)
