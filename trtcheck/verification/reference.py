"""Eager in float64: the reference that tells a conversion error from rounding.

A compiled output that misses eager's by more than the tolerances may still be as right as eager itself: both
round, differently. Eager run once more in float64 (the model and its floating inputs cast) gives the exact
result to within float64's rounding, against which both errors are measured (``judge.Judge``), as
``torch._dynamo``'s accuracy check does. An op without a float64 kernel keeps its
own dtype: the reference is then as exact as the model allows. A model's own casts are part of its math, not of its
rounding: a cast to fp16/bf16 inside ``forward`` (``y.half()``, a ``_to_copy`` of a lowered graph)
rounds to that dtype and hands float64 on, and a cast to float32 keeps float64 (``_RoundWhereTheModelCasts``), so
a float32 model with a ``.half()`` submodule gets a reference rather than "mat1 and mat2 must have the same dtype";
float32 tensors a model makes itself are made in float64, so every model eager runs has a reference.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from trtcheck import qdq
from trtcheck.dtypes import PRECISION_DTYPES
from trtcheck.engines.precision import round_tf32
from trtcheck.verification.inputs import cloned
from trtcheck.verification.state import restore_state


def float64_outputs(
    model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], state: Mapping[str, torch.Tensor] | None = None
) -> tuple[Any, str]:
    """``float64_outputs_and_depth`` without the depth."""
    exact, why, _ = float64_outputs_and_depth(model, args, kwargs, state)
    return exact, why


def float64_outputs_and_depth(
    model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], state: Mapping[str, torch.Tensor] | None = None
) -> tuple[Any, str, int]:
    """``model``'s outputs on ``args``/``kwargs`` computed in float64 and ``""``; or None and why it could not run.

    ``model`` is copied (``copy.deepcopy``, with ``state``, a ``snapshot_state``, restored into the copy when
    given: the state eager started the call from) and never changed. Torch's
    default dtype is float64 during the call, so tensors ``forward`` creates itself are float64 too; every
    ``torch.fx.GraphModule`` in the model (itself, or one it calls) also has every ``dtype=`` argument of a floating
    type retargeted to float64. The third value is the model's depth in roundings: the ops the call ran that
    compute a value (views and copies not counted), what ``equivalence.rounding_bound`` allows for (0 when it
    did not run). Attention runs unfused (``unfused_attention``): ``nn.TransformerEncoder``'s fast path is one op to
    the count, and ``transformer_encoder_dynamic_seq`` got a depth of 1 and a false FAIL at fp16 from it.
    """
    try:
        wide = Float64Model(model, state)
    except Exception as error:  # noqa: BLE001 - a model that cannot be copied or cast has no reference
        return None, f"the model could not be copied to float64: {type(error).__name__}: {error}", 0
    return wide.run(args, kwargs)


class Float64Model:
    """A model copied and cast to float64 once (``float64_outputs_and_depth`` says how), to be run as often as needed:
    what a measure that runs one graph many times in float64 (each quantizer left out in turn) copies only once."""

    def __init__(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor] | None = None, *, reused: bool = False) -> None:
        self.twin = _cast_twin(model, state, torch.float64)
        # ``reused``: every run starts from the buffers the cast left (a graph that writes one: a KV cache, a counter)
        self.buffers = ({name: b.detach().clone() for name, b in self.twin.named_buffers()}
                        if reused and isinstance(self.twin, torch.nn.Module) else None)

    def run(self, args: Sequence[Any], kwargs: Mapping[str, Any], *, flip_ties: bool = False,
            left_out: frozenset[int] = frozenset()) -> tuple[Any, str, int]:
        """The outputs on ``args``/``kwargs``, ``""`` and the depth; or None, why and 0. Quantizers
        (trtcheck's quantize ops, counted in the order the call runs them): those in ``left_out`` pass their input
        through unquantized; with ``flip_ties`` every other one flips its code nearest a rounding tie."""
        widen = lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
        wide = tree_map(widen, (cloned(tuple(args)), cloned(dict(kwargs))))
        if self.buffers is not None:
            restore_state(self.twin, self.buffers)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        mode = _Quantizers(flip_ties, left_out) if flip_ties or left_out else _RoundWhereTheModelCasts()
        try:
            with torch.no_grad(), unfused_attention(), mode:
                return self.twin(*wide[0], **wide[1]), "", mode.depth
        except Exception as error:  # noqa: BLE001 - an op without a float64 kernel: the tolerances' verdict stands
            text = str(error).strip()
            return None, f"eager fails in float64: {type(error).__name__}: {text.splitlines()[0] if text else ''}", 0
        finally:
            torch.set_default_dtype(previous)


def reduced_precision_outputs(
    model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], precision: str,
    state: Mapping[str, torch.Tensor] | None = None,
) -> tuple[Any, str]:
    """``model``'s outputs computed by eager in ``precision``, and ``""``; or None and why it could not run. "fp16" or
    "bf16": the model's floating parameters and buffers and its floating inputs cast to that dtype (float64 values
    too), or, for a model holding float16/bfloat16 values of its own (``_typed``), the model as it is. "tf32"
    (``Settings.tf32``): the model in float32 under ``tf32_rounding``, every float32 matmul and convolution factor
    rounded to TF32 as the engine rounds them. What eager itself errs by at that precision: the yardstick of a
    compiled module built with it (``equivalence.judge_reduced_precision``). ``model`` is copied and never changed."""
    dtype = torch.float32 if precision == "tf32" else PRECISION_DTYPES[precision]
    typed = precision != "tf32" and _typed(model, args, kwargs)
    try:
        twin = _cast_twin(model, state, None if typed else dtype)
    except Exception as error:  # noqa: BLE001 - a model that cannot be copied or cast has no such reference
        return None, f"the model could not be copied to {dtype}: {type(error).__name__}: {error}"
    narrow = lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    low = tree_map(narrow, (cloned(tuple(args)), cloned(dict(kwargs)))) if not typed else (cloned(tuple(args)), cloned(dict(kwargs)))
    rounding = tf32_rounding() if precision == "tf32" else _WidenWhereMissing(dtype)
    try:
        with torch.no_grad(), rounding:
            return twin(*low[0], **low[1]), ""
    except Exception as error:  # noqa: BLE001 - a model that fails in that dtype for another reason: no yardstick
        text = str(error).strip()
        where = "float32 under TF32 rounding" if precision == "tf32" else dtype
        return None, f"eager fails in {where}: {type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _typed(model: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """The model holds float16/bfloat16 values of its own (a parameter, a buffer, an input): its dtypes are the user's,
    so eager "at a reduced precision" is the model as it is, as the engine keeps its float32 parts float32
    (``compiler.mixed_precision``: ``precision`` lowers a float32 model, never a typed one)."""
    low = (torch.float16, torch.bfloat16)
    tensors = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    tensors += [leaf for leaf in tree_leaves((tuple(args), dict(kwargs))) if isinstance(leaf, torch.Tensor)]
    return any(tensor.dtype in low for tensor in tensors)


def _cast_twin(model: torch.nn.Module, state: Mapping[str, torch.Tensor] | None, dtype: torch.dtype | None) -> Any:
    """What runs ``model`` in ``dtype`` (None: its own dtypes) without changing it: a deep copy cast to ``dtype`` (with ``state``, a
    ``snapshot_state``, restored into it), or, for a model ``copy.deepcopy`` refuses (a buffer made by an op that
    tracked gradients is no graph leaf), ``model`` itself called with cast copies of its parameters and buffers
    (``torch.func.functional_call``: an in-place update lands in the copies)."""
    try:
        twin = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - not copyable: swap cast copies of its tensors in for the call instead
        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        tensors.update(state or {})
        cast = {name: t.detach().to(dtype or t.dtype) if t.is_floating_point() else t.detach().clone() for name, t in tensors.items()}
        return lambda *args, **kwargs: torch.func.functional_call(model, cast, args, kwargs, strict=False)
    if state is not None:
        restore_state(twin, state)
    if dtype is None:  # the model's own dtypes
        return twin
    twin = twin.to(dtype)
    if dtype == torch.float64:
        for module in twin.modules():  # a graph calling graphs (a cond's branches, a wrapped body): each of them
            if isinstance(module, torch.fx.GraphModule):
                _widen_dtype_arguments(module)
    return twin


class _WidenWhereMissing(TorchDispatchMode):
    """Eager in fp16/bf16 where PyTorch has the kernel, float32 (then rounded back) where it has none (CPU has no
    fp16 Cholesky, for one): eager's error at that precision for a model one op of which lacks a low-precision
    kernel, as autocast computes such ops in float32. An in-place op is never widened (its copy would be written)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError) as error:
            if "not implemented for" not in str(error) or func._schema.is_mutable:
                raise
        low = self.dtype
        wide = tree_map(lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype == low else x, (args, kwargs))
        out = func(*wide[0], **wide[1])
        return tree_map(lambda x: x.to(low) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)


_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)
_ROUNDED = (torch.float16, torch.bfloat16)
_NOT_ROUNDING = (torch.ops.aten.clone, torch.ops.aten.detach, torch.ops.aten.copy_, torch.ops.aten.lift_fresh,
                 torch.ops.aten.empty, torch.ops.aten.empty_like, torch.ops.aten.zeros, torch.ops.aten.zeros_like,
                 torch.ops.aten.ones, torch.ops.aten.ones_like, torch.ops.aten.full, torch.ops.aten.full_like)


class _RoundWhereTheModelCasts(TorchDispatchMode):
    """The float64 reference's rule for the dtypes a model asks for itself. A cast of a float64 value to fp16/bf16
    rounds to that dtype and hands float64 on (the cast is a rounding of the exact math, and every op after it sees
    float64, as the parameters the twin cast are). Float32 is the precision the reference replaces, wherever the model
    names it: a cast to float32 (of a float64 value, or of an integer grid: ``arange(h).float()``) gives float64, an op
    asked for ``dtype=torch.float32`` (``arange``, ``zeros``, a ``sum``'s accumulator: a rotary table) computes in
    float64, and any other op that still gives a float32 value (a float32 constant the model holds) hands it on in
    float64; views and in-place ops keep their dtype, since their output is their input. Without this, a model making
    float32 tensors itself (torchvision's RAFT, timm's rotary embeddings) met its float64 weights and had no reference.
    ``depth`` counts the ops run that compute a value (not views, casts or copies): the roundings an engine may make
    on the way to the outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not func.is_view and func not in _CASTS and func.overloadpacket not in _NOT_ROUNDING:
            self.depth += 1
        if func in _CASTS and args and isinstance(args[0], torch.Tensor):
            target = kwargs.get("dtype", args[1] if len(args) > 1 else None)
            if target == torch.float32:
                wide = dict(kwargs, dtype=torch.float64) if "dtype" in kwargs else kwargs
                return func(*((args[0], torch.float64, *args[2:]) if "dtype" not in kwargs else args), **wide)
            if target in _ROUNDED and args[0].dtype == torch.float64:
                return func(*args, **kwargs).to(torch.float64)
            return func(*args, **kwargs)
        if kwargs.get("dtype") == torch.float32:
            kwargs = dict(kwargs, dtype=torch.float64)
        out = func(*args, **kwargs)
        if func.is_view or func._schema.is_mutable:
            return out
        return tree_map(lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)


class _Quantizers(_RoundWhereTheModelCasts):
    """The float64 reference with its quantizers (trtcheck's quantize ops, counted in call order) changed: those in
    ``left_out`` pass their input through (a quantizer left out: ``verification.quantizers``); with ``flip_ties``, every
    other one moves the one code nearest a rounding tie one step to the other side, what an engine whose float32
    arithmetic lands that input on the other side of the tie computes (``qdq.flip_nearest_tie``; how far the outputs
    then move is the quantized judge's measure of rounding, ``judge.Distance.flips``)."""

    def __init__(self, flip_ties: bool = False, left_out: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.flip_ties, self.left_out, self.calls = flip_ties, left_out, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        call = qdq.quant_call(func, args)
        if call is None:
            return super().__torch_dispatch__(func, types, args, kwargs)
        index, self.calls = self.calls, self.calls + 1
        if index in self.left_out:
            return call.input.clone()
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if not self.flip_ties or call.unsigned:  # ModelOpt's unsigned INT8: not TensorRT's arithmetic, not flipped
            return out
        return qdq.flip_nearest_tie(call.input, out, call.amax, call.fmt)


@torch.compiler.disable  # eager ``torch.cond`` runs under ``torch.compile``, which must not trace the mode's entry
def _cond_under(mode: TorchDispatchMode, pred: Any, true_fn: Any, false_fn: Any, operands: Any) -> Any:
    """``torch.cond`` in eager at reduced precision: the branch taken runs under the same mode, so its ops are
    widened where they lack a kernel as the top level's are (a dispatch mode has no rule for cond of its own)."""
    with mode:
        return (true_fn if pred else false_fn)(*operands)


class Tf32RoundingMode(TorchDispatchMode):
    """Eager's matmuls and convolutions with their float32 factors rounded to TF32 (``round_tf32``), accumulated in
    float32: the yardstick of ``Settings.tf32`` (the judge compares the compiled module's error against float64 with
    this eager's, as it does eager in fp16 for ``precision="fp16"``)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        factors = _TF32_FACTORS.get(func)
        if factors is not None:
            args = tuple(round_tf32(a) if i in factors and isinstance(a, torch.Tensor) else a for i, a in enumerate(args))
        return func(*args, **kwargs)


_aten = torch.ops.aten
_TF32_FACTORS: dict[Any, frozenset[int]] = {
    _aten.mm.default: frozenset({0, 1}), _aten.bmm.default: frozenset({0, 1}), _aten.addmm.default: frozenset({1, 2}),
    _aten.baddbmm.default: frozenset({1, 2}), _aten.convolution.default: frozenset({0, 1}),
    _aten.dot.default: frozenset({0, 1}), _aten.mv.default: frozenset({0, 1}), _aten.addmv.default: frozenset({1, 2}),
}
"""The ATen ops eager's float32 matmuls and convolutions reach on the CPU (``linear`` and ``matmul`` dispatch to these)
-> the arguments that are their factors (not ``addmm``'s bias). Fused kernels would hide their products from this
mode, so ``tf32_rounding`` turns them off: attention runs PyTorch's math path (its ``bmm``s rounded)."""


@contextlib.contextmanager
def tf32_rounding() -> Iterator[None]:
    """Eager inside computes like a TF32 engine: every float32 factor of an ``mm``, ``bmm``, ``addmm``, ``baddbmm``,
    ``dot``, ``mv``, ``addmv`` and ``convolution`` rounded to TF32 (``round_tf32``), the sums in float32. The judge's
    yardstick for ``Settings.tf32`` (``judged_precision`` "tf32"): eager's own error against float64 under the same
    rounding the engine applies. Fused kernels whose products this cannot see are turned off inside: the
    ``nn.MultiheadAttention``/``TransformerEncoderLayer`` fast path (``torch.backends.mha``) and the fused
    scaled-dot-product attention kernels (only ``SDPBackend.MATH``, whose ``bmm``s are rounded); with them on the
    yardstick is plain float32 (docs/performance.md, section "Reduced precision")."""
    with unfused_attention(), Tf32RoundingMode():
        yield


@contextlib.contextmanager
def unfused_attention() -> Iterator[None]:
    """Eager inside runs attention as the ops it is made of: the ``nn.MultiheadAttention``/``TransformerEncoderLayer``
    fast path (``torch.backends.mha``) off, and scaled-dot-product attention on its math path (``SDPBackend.MATH``).
    For the references that watch eager's ops through a dispatch mode: a fused kernel is one op to the mode, though it
    computes (and an engine rounds) dozens."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


_MODES_WITH_BRANCHES = (_WidenWhereMissing, _RoundWhereTheModelCasts, Tf32RoundingMode)


def _register_higher_order_rules() -> None:
    """Rules for the control-flow higher-order ops under the references' dispatch modes (``_WidenWhereMissing``,
    ``_RoundWhereTheModelCasts``, and ``Tf32RoundingMode``, TF32's yardstick): a dispatch mode without one makes
    torch refuse the op ("There was no rule registered for HigherOrderOperator cond"). ``cond`` runs its branch,
    ``while_loop`` (and its stacked-output form) its dense loop, under the mode."""
    import importlib

    from torch._C import DispatchKey
    from torch._higher_order_ops.cond import cond_op

    loops = importlib.import_module("torch._higher_order_ops.while_loop")  # the package's attribute is the function

    for mode_type in _MODES_WITH_BRANCHES:
        cond_op.py_impl(mode_type)(_cond_under)
    for name in ("while_loop_op", "while_loop_stack_output_op"):
        op = getattr(loops, name, None)
        dense = op.py_kernels.get(DispatchKey.CompositeExplicitAutograd) if op is not None else None
        if dense is None:
            continue

        @torch.compiler.disable
        def loop_under(mode: TorchDispatchMode, *args: Any, _dense: Any = dense, **kwargs: Any) -> Any:
            with mode:
                return _dense(*args, **kwargs)

        for mode_type in _MODES_WITH_BRANCHES:
            op.py_impl(mode_type)(loop_under)


_register_higher_order_rules()


def _widen_dtype_arguments(graph_module: torch.fx.GraphModule) -> None:
    """A graph's explicit floating dtype arguments (``_to_copy``, ``full``, ``to.dtype``) retargeted to float64, so the
    twin of a lowered or random graph computes every floating value in float64."""
    def widen(value: Any) -> Any:
        return torch.float64 if isinstance(value, torch.dtype) and value.is_floating_point else value

    changed = False
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if _is_cast(node) and any(value in _ROUNDED for value in (*node.args, *node.kwargs.values())):
            continue  # the model's own rounding: ``_RoundWhereTheModelCasts`` rounds it and hands float64 on
        args, kwargs = tree_map(widen, (node.args, dict(node.kwargs)))  # positional too: ``aten.to.dtype(x, torch.float16)``
        if args != node.args or kwargs != dict(node.kwargs):
            node.args, node.kwargs = args, kwargs
            changed = True
    if changed:
        graph_module.recompile()


def _is_cast(node: torch.fx.Node) -> bool:
    """A node that casts its input to a dtype named in its arguments (``_to_copy``, ``to``, ``convert_element_type``)."""
    packet = getattr(node.target, "overloadpacket", node.target)
    return packet in (torch.ops.aten._to_copy, torch.ops.aten.to, torch.ops.prims.convert_element_type)
