"""Property test: binary elementwise converters under random broadcasting, dtypes and scalar operands.

Type promotion (int/float/bool mixes, 0-dim tensors, Python scalars on either side) is where ONNX's
strict typing and ATen's implicit promotion disagree, so this is searched rather than enumerated.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import trtcheck.conversion as converters
from suites.conversion.converter_harness import check, export_graph

A = torch.ops.aten
_OPS = {
    "add": A.add.Tensor, "sub": A.sub.Tensor, "mul": A.mul.Tensor, "div": A.div.Tensor,
    "maximum": A.maximum.default, "minimum": A.minimum.default, "eq": A.eq.Tensor, "ne": A.ne.Tensor,
    "lt": A.lt.Tensor, "ge": A.ge.Tensor, "floor_div": A.div.Tensor_mode, "remainder": A.remainder.Tensor,
}
_COMPARISONS = {"eq", "ne", "lt", "ge"}
_DTYPES = [torch.float32, torch.float16, torch.int32, torch.int64, torch.bool]


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int, nonzero: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    values = torch.randint(1, 6, shape, generator=generator) * torch.where(
        torch.rand(shape, generator=generator) > 0.5, 1, -1)
    if dtype.is_floating_point:
        values = values + torch.rand(shape, generator=generator).round(decimals=2)
    return values.to(dtype) if nonzero else (values * (torch.rand(shape, generator=generator) > 0.3)).to(dtype)


@given(
    op=st.sampled_from(sorted(_OPS)),
    dtypes=st.tuples(st.sampled_from(_DTYPES), st.sampled_from(_DTYPES)),
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    scalar=st.sampled_from([None, 2, -1.5, True]),
    seed=st.integers(0, 2**16),
)
def test_binary_promotion_and_broadcasting(op, dtypes, shapes, scalar, seed) -> None:
    target = _OPS[op]
    a = _tensor(shapes.input_shapes[0], dtypes[0], seed, nonzero=False)
    b = _tensor(shapes.input_shapes[1], dtypes[1], seed + 1, nonzero=True)
    kwargs = {"rounding_mode": "floor"} if op == "floor_div" else {}

    if scalar is None:
        def fn(x, y):
            return target(x, y, **kwargs)
        args = (a, b)
    else:
        def fn(x):
            return target(x, scalar, **kwargs)
        args = (a,)
    try:
        with torch.no_grad():
            expected = fn(*args)
    except RuntimeError:
        return  # e.g. sub on bools: PyTorch itself refuses
    gm = export_graph(fn, args)
    node = next(n for n in gm.graph.nodes if n.target == target)
    if not converters.is_convertible(node):
        # The one deliberate rejection: arithmetic whose result is bool (ONNX Add/Mul/... take none).
        assert op not in _COMPARISONS and expected.dtype == torch.bool, (op, dtypes, scalar)
        return
    check(fn, args, targets=(target,))


_REDUCTIONS = {
    "sum": lambda x, dims, keep: A.sum.dim_IntList(x, dims, keep),
    "mean": lambda x, dims, keep: A.mean.dim(x, dims, keep),
    "amax": lambda x, dims, keep: A.amax.default(x, dims, keep),
    "amin": lambda x, dims, keep: A.amin.default(x, dims, keep),
    "prod": lambda x, dims, keep: A.prod.dim_int(x, dims[0], keep),
    "any": lambda x, dims, keep: A.any.dims(x, dims, keep),
    "all": lambda x, dims, keep: A.all.dims(x, dims, keep),
    "argmax": lambda x, dims, keep: A.argmax.default(x, dims[0], keep),
    "argmin": lambda x, dims, keep: A.argmin.default(x, dims[0], keep),
    "max.dim": lambda x, dims, keep: A.max.dim(x, dims[0], keep),
    "var": lambda x, dims, keep: A.var.correction(x, dims, correction=1, keepdim=keep),
    "cumsum": lambda x, dims, keep: A.cumsum.default(x, dims[0]),
}


@given(
    op=st.sampled_from(sorted(_REDUCTIONS)),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    data=st.data(),
    keep=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.int32, torch.int64, torch.bool]),
)
@pytest.mark.slow
def test_reductions_over_random_axes(op, shape, data, keep, dtype) -> None:
    rank = len(shape)
    dims = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                              unique_by=lambda d: d % rank), label="dims")
    # Distinct values: argmax/max.dim tie-breaking is not part of either contract.
    x = torch.randperm(int(torch.tensor(shape).prod()), generator=torch.Generator().manual_seed(rank))
    x = (x.reshape(shape) % 7 == 0) if dtype == torch.bool else (x.reshape(shape) - 5).to(dtype)
    fn = _REDUCTIONS[op]
    try:
        with torch.no_grad():
            fn(x, dims, keep)
    except RuntimeError:
        return  # e.g. mean or var of integers: PyTorch refuses
    gm = export_graph(lambda t: fn(t, dims, keep), (x,))
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target.__module__ != "_operator"]
    if not all(converters.is_convertible(n) for n in nodes):
        # Deliberate rejections: bool inputs to value reductions (cumsum takes them: it sums in int64).
        assert dtype == torch.bool and op not in ("any", "all", "cumsum"), (op, dtype)
        return
    check(lambda t: fn(t, dims, keep), (x,))


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
@pytest.mark.slow
def test_slice_and_permute_random_arguments(shape, data) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(-rank, rank - 1), label="dim")
    start = data.draw(st.one_of(st.none(), st.integers(-6, 6)), label="start")
    end = data.draw(st.one_of(st.none(), st.integers(-6, 6), st.just(2**63 - 1)), label="end")
    step = data.draw(st.integers(1, 3), label="step")
    perm = data.draw(st.permutations(range(rank)), label="perm")
    x = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float32).reshape(shape)

    def fn(t):
        return A.permute.default(A.slice.Tensor(t, dim, start, end, step), perm)

    with torch.no_grad():
        expected = fn(x)
    gm = export_graph(fn, (x,))
    if expected.numel() == 0:  # an empty slice converts (a value a cat drops); a permute of nothing stays in PyTorch
        node = next(n for n in gm.graph.nodes if n.target == A.slice.Tensor)
        assert converters.is_convertible(node)
        check(lambda t: A.slice.Tensor(t, dim, start, end, step), (x,), targets=(A.slice.Tensor,))
        return
    check(fn, (x,), targets=(A.slice.Tensor, A.permute.default))
