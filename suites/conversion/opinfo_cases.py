"""OpInfo samples as one-op models, compiled by trtcheck and compared with eager PyTorch.

Shared by ``test_opinfo.py`` (one test per op and dtype, samples looped inside) and ``opinfo_summary.py``
(the counts the issue's "Done means" asks for). Every sample of every OpInfo of torch's ``op_db`` becomes a
module whose ``forward`` calls ``op.op(sample.input, *sample.args, **sample.kwargs)``, its Tensors taken as
the module's inputs and every other value a constant. ``trtcheck.compile`` (``min_block_size=1``, ONNX
Runtime) then sorts the sample into one of:

* ``equal``: at least one node ran in TensorRT, no segment fell back, and the output matches eager;
* ``refused``: no node was claimed: no converter, or its validator said no (the reasons are recorded);
* ``skipped``: torch.export could not capture the sample, eager fails on it, its eager output is random
  (eager disagrees with itself, or the graph holds a random or uninitialized-memory op), or the graph has
  no compute node at all;
* ``failing``: a TensorRT segment fell back at conversion or engine build, a validator raised, the compiled
  output differs from eager, or ``trtcheck.compile`` (or calling its result) raised anything but a
  ``LoweringError``.

Only the public API is used (``trtcheck.compile``, ``CompiledModule.partition`` / ``.conversion``), so this
keeps working while the converters move between modules.
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import trtcheck
from trtcheck.tools.coverage import OneOp

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "int64": torch.int64,
    "bool": torch.bool,
}

# rtol, atol per output dtype (integers and bool: exact): torch's float32 defaults, verify's fp16 and bf16
# tolerances. A floating output outside them still passes when it is no further from a float64 reference
# than eager's own output is (``as_good_as_eager``, as torch._dynamo.utils.same does with its fp64_ref): an
# engine that rounds each intermediate of a decomposed op (addr, cross, losses) or sums a convolution in
# another order than eager's kernel is not wrong, only differently rounded. A converter bug (log1p as
# log(1 + x), a wrong op) is far worse than eager against the reference, and still fails.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
AS_GOOD_FACTOR = 2.0  # the compiled error may be up to this many times eager's (torch._dynamo.utils.same: 2-3)

EQUAL = "equal"
REFUSED = "refused"
SKIPPED = "skipped"
FAILING = "failing"
OUTCOMES = (EQUAL, REFUSED, SKIPPED, FAILING)

# Samples per op and dtype in each hypothesis profile (root conftest.py); None means every sample.
SAMPLES_PER_PROFILE: dict[str, int | None] = {"ci": 1, "dev": 1, "nightly": None}
DEFAULT_PROFILE = "ci"
PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"

# Ops whose output is uninitialized memory: eager may agree with itself by chance (the allocator hands
# back the same block), but no engine can be expected to reproduce it.
_UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"})


def samples_per_op(profile: str | None) -> int | None:
    """How many samples per op and dtype a profile runs (``nightly``: all of them)."""
    return SAMPLES_PER_PROFILE.get(profile or DEFAULT_PROFILE, SAMPLES_PER_PROFILE[DEFAULT_PROFILE])


# ---- the OpInfo database -----------------------------------------------------------------------------

_OP_DB: list[Any] | None = None


def op_db() -> list[Any]:
    """torch's OpInfo list (``common_methods_invocations.op_db``; importing it needs ``expecttest``)."""
    global _OP_DB
    if _OP_DB is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as db
        _OP_DB = list(db)
    return _OP_DB


def op_id(op: Any) -> str:
    """A readable, unique name for an OpInfo: ``name`` or ``name.variant``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def find_op(name: str) -> Any:
    """The OpInfo whose ``op_id`` is ``name``."""
    global _BY_ID
    if _BY_ID is None:
        _BY_ID = {op_id(op): op for op in op_db()}
    return _BY_ID[name]


_BY_ID: dict[str, Any] | None = None


def supports(op: Any, dtype: torch.dtype) -> bool:
    return dtype in op.supported_dtypes("cpu")


def op_dtype_pairs() -> list[tuple[str, str]]:
    """Every (op id, dtype name) the suite runs: the four dtypes, where the op supports them on CPU."""
    return [(op_id(op), name) for op in op_db() for name, dtype in DTYPES.items() if supports(op, dtype)]


# ---- one sample ---------------------------------------------------------------------------------------


def one_op_model(op: Any, sample: Any) -> tuple[OneOp, tuple[torch.Tensor, ...]]:
    """The sample's op as a module of its tensors, and those tensors: copies, since OpInfo's generators reuse one
    tensor across samples and write into it for the next (the masked ops' samples put inf, then -inf, then NaN in
    the same input), which changed a prepared sample's inputs after eager had run on them."""
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors = tuple(v.detach().clone() for v in leaves if isinstance(v, torch.Tensor))
    return OneOp(op.op, leaves, spec), tensors


def _clone(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in tensors)


@dataclass
class SampleResult:
    op: str
    dtype: str
    index: int
    outcome: str
    reason: str = ""  # the skip reason, the refusal (explain), or the failure
    claimed: tuple[str, ...] = ()  # overloads that ran (or were meant to run) in TensorRT
    seconds: float = 0.0
    description: str = ""  # the sample's shapes, for failure messages

    def line(self) -> str:
        return f"{self.op} {self.dtype} sample {self.index} [{self.description}]: {self.outcome}: {self.reason}"


def _describe(value: Any) -> str:
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}:{str(v.dtype).removeprefix('torch.')}"
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."

    leaves, _ = tree_flatten(value)
    return ", ".join(one(v) for v in leaves)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}"[:300]


def _export_reason(error: trtcheck.LoweringError) -> str:
    """The torch-side cause of a LoweringError, short enough to count reasons by."""
    cause = error.__cause__
    if cause is not None:
        return "export failed: " + _first_line(cause)[:120]
    return "export failed: " + _first_line(error)[:120]


def _flat_outputs(value: Any) -> list[Any]:
    leaves, _ = tree_flatten(value)
    return leaves


def _mismatch(actual: Any, expected: Any) -> str:
    """'' when ``actual`` matches eager's ``expected`` (dtype-aware tolerances, NaN equal to NaN)."""
    got, want = _flat_outputs(actual), _flat_outputs(expected)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i} is {type(a).__name__}, eager's is a Tensor"
            if e.is_sparse or e.layout != torch.strided:
                e = e.to_dense()
            if a.layout != torch.strided:
                a = a.to_dense()
            rtol, atol = TOLERANCES.get(e.dtype, (0.0, 0.0))
            if e.is_complex():
                rtol, atol = TOLERANCES.get(e.real.dtype, (0.0, 0.0))
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
            except AssertionError as error:
                lines = [line for line in str(error).splitlines() if line.strip()]
                return f"output {i}: " + " ".join(lines[:4])[:400]
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e))):
                return f"output {i}: {a!r} != {e!r}"
        elif a != e:
            return f"output {i}: {a!r} != eager's {e!r}"
    return ""


def differs(actual: Any, prepared: Prepared) -> str:
    """'' when the compiled output matches eager's within tolerance, or is as good as eager's (floats)."""
    difference = _mismatch(actual, prepared.expected)
    if not difference or not any(
        isinstance(e, torch.Tensor) and e.dtype in TOLERANCES for e in _flat_outputs(prepared.expected)
    ):
        return difference
    if as_good_as_eager(actual, prepared):
        return ""
    return difference


def as_good_as_eager(actual: Any, prepared: Prepared) -> bool:
    """True when every output is within tolerance of eager's, except floating ones that are at most
    ``AS_GOOD_FACTOR`` times further (max abs error, plus the dtype's atol) from a float64 reference than
    eager's own are.

    The reference is the model run on the inputs upcast to float64 (integer inputs as they are), where
    eager can run it; NaN and Inf must sit where eager has them, except where float64 is finite and the result is
    within the dtype's tolerance of it (eager overflowed, the engine did not)."""
    try:
        with torch.no_grad():
            reference = prepared.model(*(t.double() if t.is_floating_point() else t.clone() for t in prepared.tensors))
    except Exception:  # noqa: BLE001 - no reference, no second chance
        return False
    got, want, ref = _flat_outputs(actual), _flat_outputs(prepared.expected), _flat_outputs(reference)
    if not len(got) == len(want) == len(ref):
        return False
    for a, e, r in zip(got, want, ref):
        if not (isinstance(e, torch.Tensor) and e.dtype in TOLERANCES):
            if _mismatch([a], [e]):
                return False
            continue
        if not (isinstance(a, torch.Tensor) and isinstance(r, torch.Tensor) and a.shape == e.shape == r.shape):
            return False
        rtol, atol = TOLERANCES[e.dtype]
        a, e, r = a.double(), e.double(), r.double()
        # Where eager overflowed (inf or NaN) and float64 did not, a finite result within tolerance of float64 is the
        # better answer (soft_margin_loss in float16: eager's exp overflows, the engine's does not).
        overflowed = ~e.isfinite() & r.isfinite() & a.isfinite() & ((a - r).abs() <= atol + rtol * r.abs())
        a, e = torch.where(overflowed, r, a), torch.where(overflowed, r, e)
        if not torch.equal(a.isnan(), e.isnan()) or not torch.equal(a.isinf(), e.isinf()):
            return False
        if a.isinf().any() and not torch.equal(a[a.isinf()], e[e.isinf()]):
            return False
        finite = a.isfinite() & r.isfinite()
        compiled_error = (a - r)[finite].abs().max() if finite.any() else torch.tensor(0.0)
        eager_error = (e - r)[finite].abs().max() if finite.any() else torch.tensor(0.0)
        if compiled_error > AS_GOOD_FACTOR * eager_error + atol:
            return False
    return True


def _random_targets(nodes: Iterable[torch.fx.Node]) -> list[str]:
    """Overloads whose output is random (tagged ``nondeterministic_seeded``) or uninitialized (``empty*``)."""
    found = []
    for node in nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            name = target.overloadpacket.__name__
            if torch.Tag.nondeterministic_seeded in target.tags or name.startswith(("empty", "new_empty")):
                found.append(str(target))
    return found


def _overload_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # aten.add.Tensor
    return getattr(target, "__name__", str(target))


def run_sample(op: Any, dtype_name: str, index: int, sample: Any) -> SampleResult:
    """Compile one sample as a one-op model and sort it into EQUAL, REFUSED, SKIPPED or FAILING."""
    prepared = prepare(op, dtype_name, index, sample)
    return prepared if isinstance(prepared, SampleResult) else run_alone(prepared)


@dataclass
class Prepared:
    """A sample eager runs, deterministically, to a Tensor output: ready to be compiled."""

    result: SampleResult
    model: OneOp
    tensors: tuple[torch.Tensor, ...]
    expected: Any  # eager's output
    started: float


def prepare(op: Any, dtype_name: str, index: int, sample: Any) -> SampleResult | Prepared:
    """What is decided without trtcheck (eager fails, random, no Tensor output: SKIPPED), or a Prepared."""
    started = time.perf_counter()
    result = SampleResult(op_id(op), dtype_name, index, SKIPPED)
    result.description = _describe((sample.input, sample.args, sample.kwargs))
    model, tensors = one_op_model(op, sample)
    reason = ""
    if op.name in _UNINITIALIZED:
        reason = "random: output is uninitialized memory"
    else:
        try:
            with torch.no_grad():
                first = model(*_clone(tensors))
                second = model(*_clone(tensors))
        except Exception as error:  # noqa: BLE001 - a sample eager cannot run is no test of a converter
            reason = "eager failed: " + _first_line(error)[:120]
        else:
            outputs = _flat_outputs(first)
            if _mismatch(second, first):
                reason = "random: eager disagrees with itself"
            elif not any(isinstance(v, torch.Tensor) for v in outputs):
                reason = f"no Tensor output ({', '.join(sorted({type(v).__name__ for v in outputs})) or 'nothing'})"
    if reason:
        result.reason = reason
        result.seconds = time.perf_counter() - started
        return result
    return Prepared(result, model, tensors, first, started)


def _export_failure(model: torch.nn.Module, tensors: tuple[torch.Tensor, ...]) -> str:
    """'' when torch.export captures the model (trtcheck's lowering calls it just so), else why not.

    Only for a batch that failed to lower: finds the samples to take out of it cheaply (export without
    the decomposition to core ATen, which is most of lowering's time).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.export(model, _clone(tensors))
    except Exception as error:  # noqa: BLE001 - torch.export raises many unrelated types
        return "export failed: " + _first_line(error)[:120]
    return ""


def run_alone(prepared: Prepared) -> SampleResult:
    """The sample as its own one-op model through ``trtcheck.compile``: the outcome that counts."""
    result = prepared.result
    try:
        _sort_alone(prepared, result)
    finally:
        result.seconds = time.perf_counter() - prepared.started
    return result


def _compile(model: torch.nn.Module, tensors: tuple[torch.Tensor, ...]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trtcheck.compile(model, _clone(tensors), settings=trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                                frontend="export")  # the converters, one op each: never torch.compile's graphs


def _compute_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]


def _claimed_names(compiled: Any) -> set[str]:
    """Nodes the partitioner put in TensorRT segments, before any fallback."""
    return {name for target, names in compiled.conversion.layout if target == "tensorrt" for name in names}


def _judge(compiled: Any, nodes: list[torch.fx.Node], result: SampleResult, fell_back: str = "") -> bool:
    """Sort a sample by its graph nodes alone; False when only its outputs can tell (claimed, no fault)."""
    partition = compiled.partition
    claimed = _claimed_names(compiled)
    mine = [n for n in nodes if n.name in claimed]
    result.claimed = tuple(sorted({_overload_name(n) for n in mine}))
    validator_errors = [
        f"{n.name} ({_overload_name(n)}): {partition.reasons[n]}"
        for n in nodes
        if n in partition.reasons and partition.reasons[n].kind is trtcheck.ReasonKind.VALIDATOR_ERROR
    ]
    if validator_errors:
        result.outcome, result.reason = FAILING, "validator raised: " + "; ".join(validator_errors)
    elif not nodes:
        result.outcome, result.reason = SKIPPED, "nothing to convert: the graph has no compute node"
    elif not mine:
        result.outcome = REFUSED
        result.reason = "; ".join(f"{_overload_name(n)}: {partition.reasons.get(n, 'no reason')}" for n in nodes)[:400]
    elif fell_back:
        result.outcome, result.reason = FAILING, "fell back: " + fell_back
    elif _random_targets(nodes):
        result.outcome, result.reason = SKIPPED, f"random: {', '.join(_random_targets(nodes))}"
    else:
        return False
    return True


def _sort_alone(prepared: Prepared, result: SampleResult) -> None:
    try:
        compiled = _compile(prepared.model, prepared.tensors)
    except trtcheck.LoweringError as error:
        result.outcome, result.reason = SKIPPED, _export_reason(error)
        return
    except Exception as error:  # noqa: BLE001 - anything else out of compile is a trtcheck failure
        result.outcome = FAILING
        result.reason = "compile raised " + _first_line(error) + "\n" + "".join(traceback.format_exception(error)[-3:])
        return
    fell_back = " | ".join(compiled.partition.fallbacks)[:600]
    if _judge(compiled, _compute_nodes(compiled.conversion.graph_module), result, fell_back):
        return
    try:
        with torch.no_grad():
            actual = compiled(*_clone(prepared.tensors))
    except Exception as error:  # noqa: BLE001
        result.outcome, result.reason = FAILING, "calling the compiled module raised " + _first_line(error)
        return
    difference = differs(actual, prepared)
    if difference:
        result.outcome, result.reason = FAILING, "differs from eager: " + difference
        return
    result.outcome, result.reason = EQUAL, ""


# ---- many samples in one model ------------------------------------------------------------------------
#
# Lowering (torch.export, then the decomposition to core ATen) takes ~0.2 s per model whatever its size,
# nearly all of it fixed cost in ``run_decompositions``. The ci profile therefore compiles the samples of
# several ops as one model whose children are their one-op models (``s0``, ``s1``, ...): each node says
# whose it is through ``nn_module_stack``. A batch only ever settles what it can settle per sample: a
# sample whose nodes were all refused, or that was claimed, did not fall back and matches eager. Anything
# else (the batch failing to lower or compile, a fallback, a raising validator, a mismatch) sends the
# samples concerned back to ``run_alone``, so every failure reported is that of a one-op model.


class Batch(torch.nn.Module):
    def __init__(self, models: Sequence[OneOp]) -> None:
        super().__init__()
        self.counts = [len(m.positions) for m in models]
        for i, model in enumerate(models):
            self.add_module(f"s{i}", model)

    def forward(self, *tensors: torch.Tensor) -> tuple[Any, ...]:
        outputs, start = [], 0
        for i, count in enumerate(self.counts):
            outputs.append(getattr(self, f"s{i}")(*tensors[start:start + count]))
            start += count
        return tuple(outputs)


def _owner(node: torch.fx.Node) -> int | None:
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        head = path.split(".")[0]
        if head.startswith("s") and head[1:].isdigit():
            return int(head[1:])
    return None


def run_batch(batch: Sequence[Prepared], retry: bool = True) -> list[SampleResult]:
    """Compile ``batch`` as one model; samples it cannot settle are compiled alone (see above)."""
    if len(batch) <= 1:
        return [run_alone(p) for p in batch]
    tensors = tuple(t for p in batch for t in p.tensors)
    try:
        compiled = _compile(Batch([p.model for p in batch]), tensors)
    except trtcheck.LoweringError:  # some sample torch.export cannot capture (about 1 in 100): take it out
        if not retry:
            return [run_alone(p) for p in batch]
        results, rest = [], []
        for prepared in batch:
            reason = _export_failure(prepared.model, prepared.tensors)
            if reason:
                prepared.result.reason = reason
                prepared.result.seconds = time.perf_counter() - prepared.started
                results.append(prepared.result)
            else:
                rest.append(prepared)
        return results + run_batch(rest, retry=False)
    except Exception:  # noqa: BLE001 - the samples alone say what went wrong, and whose fault it is
        return [run_alone(p) for p in batch]
    nodes: list[list[torch.fx.Node]] = [[] for _ in batch]
    for node in _compute_nodes(compiled.conversion.graph_module):
        owner = _owner(node)
        if owner is None:  # a node of no sample: nothing can be attributed
            return [run_alone(p) for p in batch]
        nodes[owner].append(node)
    fell_back = {
        n.name for n, reason in compiled.partition.reasons.items() if reason.kind is trtcheck.ReasonKind.CONVERSION_FAILED
    }
    results: list[SampleResult | None] = [None] * len(batch)
    undecided = []
    for i, prepared in enumerate(batch):
        if any(n.name in fell_back for n in nodes[i]):
            continue
        if _judge(compiled, nodes[i], prepared.result) and prepared.result.outcome != FAILING:
            results[i] = prepared.result
        elif prepared.result.outcome != FAILING:
            undecided.append(i)
    if undecided:
        try:
            with torch.no_grad():
                outputs = compiled(*_clone(tensors))
        except Exception:  # noqa: BLE001
            outputs = None
        for i in undecided:
            if outputs is not None and not differs(outputs[i], batch[i]):
                batch[i].result.outcome, batch[i].result.reason = EQUAL, ""
                results[i] = batch[i].result
    for i, prepared in enumerate(batch):
        if results[i] is None:
            prepared.result.outcome, prepared.result.reason, prepared.result.claimed = SKIPPED, "", ()
            results[i] = run_alone(prepared)
        else:
            prepared.result.seconds = time.perf_counter() - prepared.started
    return results  # type: ignore[return-value]


def samples(op: Any, dtype: torch.dtype, limit: int | None) -> Iterator[tuple[int, Any]]:
    """The op's first ``limit`` samples for ``dtype`` on CPU (all when ``limit`` is None), seeded.

    ``op.sample_inputs_func`` is called directly: ``op.sample_inputs`` wraps it in a ``TrackedInputIter``
    that inspects the call stack for a test function on every call (~15 ms each, minutes for the suite).
    """
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iterator = op.sample_inputs_func(op, "cpu", dtype, False)
        for index, sample in enumerate(iterator):
            if limit is not None and index >= limit:
                return
            yield index, sample


OpResults = dict[str, list[SampleResult]]  # dtype name -> results of the op's samples for that dtype


def run_ops(ops: Sequence[Any], limit: int | None, dtypes: Sequence[str] = tuple(DTYPES), batch_size: int = 32,
            batched: bool = True) -> dict[str, OpResults]:
    """Every selected sample of ``ops`` for each dtype of ``dtypes`` the op supports: op id -> dtype -> results."""
    pairs = [(op_id(op), name) for op in ops for name in dtypes if supports(op, DTYPES[name])]
    out: dict[str, OpResults] = {op_id(op): {} for op in ops}
    for (name, dtype_name), results in run_pairs(pairs, limit, batch_size, batched).items():
        out[name][dtype_name] = results
    return out


def run_pairs(pairs: Sequence[tuple[str, str]], limit: int | None, batch_size: int = 32, batched: bool = True
              ) -> dict[tuple[str, str], list[SampleResult]]:
    """The results of the first ``limit`` samples (all: None) of each (op id, dtype name), by pair.

    With ``batched`` (the default), samples are compiled ``batch_size`` at a time (see ``run_batch``);
    otherwise each alone. A sample generator that fails adds one SKIPPED result (index -1).
    """
    out: dict[tuple[str, str], list[SampleResult]] = {}
    pending: list[Prepared] = []
    for name, dtype_name in pairs:
        op = find_op(name)
        results = out.setdefault((name, dtype_name), [])
        try:
            for index, sample in samples(op, DTYPES[dtype_name], limit):
                prepared = prepare(op, dtype_name, index, sample)
                if isinstance(prepared, SampleResult):
                    results.append(prepared)
                else:
                    pending.append(prepared)
        except Exception as error:  # noqa: BLE001 - OpInfo's own sample generator failing is not trtcheck's
            results.append(SampleResult(name, dtype_name, -1, SKIPPED, "sample_inputs failed: " + _first_line(error)))
    step = batch_size if batched else 1
    for start in range(0, len(pending), step):
        for result in run_batch(pending[start:start + step]):
            out[(result.op, result.dtype)].append(result)
    for results in out.values():
        results.sort(key=lambda r: r.index)
    return out


def run_op(name: str, dtype_name: str, limit: int | None, batched: bool = False) -> list[SampleResult]:
    """Every selected sample of one op and dtype."""
    return run_pairs([(name, dtype_name)], limit, batched=batched)[(name, dtype_name)]


# ---- expected failures --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedFailure:
    """A reviewed, known failure: every failing sample of ``op`` / ``dtype`` whose reason contains ``match``.

    ``sample`` is the first sample index known to fail: a run that covered it and saw no failure says
    the bug is fixed, and the test fails until the entry is removed.
    """

    op: str  # op id (name or name.variant)
    dtype: str  # dtype name
    why: str
    match: str = ""  # a substring of every failure reason this entry excuses
    sample: int = 0

    def excuses(self, result: SampleResult) -> bool:
        return result.op == self.op and result.dtype == self.dtype and self.match in result.reason


def expected_failure(expected: Iterable[ExpectedFailure], op: str, dtype: str) -> ExpectedFailure | None:
    for entry in expected:
        if entry.op == op and entry.dtype == dtype:
            return entry
    return None


@dataclass(frozen=True)
class NotConverted:
    """A reviewed op whose sample ``sample`` converts to nothing in ``dtypes``, and why.

    ``test_opinfo.py`` asks every op and dtype for at least one sample that converts and equals eager: a
    refused sample alone is no proof of a converter, and a validator that refused everything would pass.
    An entry excuses an op and dtype that has none, as long as its sample ``sample`` is refused or skipped;
    that sample converting fails the test until the entry is removed.

    Which of the two, and the reason, are not checked: they can change with the samples compiled alongside
    (a batch may attribute an ``_assert_tensor_metadata`` node to a sample that, compiled alone, has no
    compute node at all), while "nothing of it converts" does not.
    """

    op: str  # op id (name or name.variant)
    dtypes: tuple[str, ...]  # dtype names
    why: str
    sample: int = 0

    def excuses(self, result: SampleResult) -> bool:
        return (
            result.op == self.op and result.dtype in self.dtypes and result.index == self.sample
            and result.outcome in (REFUSED, SKIPPED)
        )


def not_converted(table: Iterable[NotConverted], op: str, dtype: str) -> NotConverted | None:
    for entry in table:
        if entry.op == op and dtype in entry.dtypes:
            return entry
    return None


def first_refusal(result: SampleResult) -> tuple[str, bool] | None:
    """For a refused sample, the overload of its first node that has no converter (``(overload, False)``)
    or whose validator said no (``(overload, True)``); None when the reason names neither."""
    for part in result.reason.split("; "):
        overload, _, rest = part.partition(": ")
        detail = rest.partition(": ")[2]
        if detail.startswith(f"no converter for {overload}"):
            return overload, False
        if detail.startswith(f"the {overload} converter's validator refused"):
            return overload, True
    return None


# ---- counts ---------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Per dtype: samples per outcome, and ops per outcome (an op's outcome is its worst sample's)."""

    samples: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    skip_reasons: Counter = field(default_factory=Counter)
    unsupported_ops: int = 0

    def add_op(self, results: Sequence[SampleResult]) -> str:
        for r in results:
            self.samples[r.outcome] += 1
            if r.outcome == SKIPPED:
                self.skip_reasons[skip_category(r.reason)] += 1
        outcome = op_outcome(results)
        self.ops[outcome] += 1
        return outcome


def skip_category(reason: str) -> str:
    """``export failed``, ``random``, ``eager failed``, ``nothing to convert``, ``no Tensor output``, ..."""
    return reason.split(":")[0].split(" (")[0]


def op_outcome(results: Sequence[SampleResult]) -> str:
    """FAILING if any sample fails; else EQUAL if any sample was claimed; else REFUSED if any was; else SKIPPED."""
    outcomes = {r.outcome for r in results}
    for outcome in (FAILING, EQUAL, REFUSED):
        if outcome in outcomes:
            return outcome
    return SKIPPED


def quiet_threads() -> None:
    """One torch thread: the suite shares 2 cores with other workers (ONNX Runtime's engines take
    trtcheck's own default, capped at the cores this process may use)."""
    torch.set_num_threads(1)
