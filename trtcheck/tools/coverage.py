"""Converter coverage of the core ATen opset, measured: ``python -m trtcheck.tools.coverage``.

For every overload of ``torch.ops.aten`` tagged ``torch.Tag.core`` (the core ATen IR that
``torch.export``'s decompositions produce), it prints whether trtcheck has a converter, which ONNX op
types that converter emits, and whether TensorRT's ONNX parser supports all of them (the table of
:mod:`trt_onnx_ops`, from onnx-tensorrt's ``docs/operators.md``; its module names the URL and version).

The ONNX op types are measured, not declared: torch's OpInfo samples (``op_db``, first sample per op and
dtype by default) are lowered the way ``trtcheck.compile`` lowers a model, and every node whose converter
accepts it is converted alone (its inputs become graph inputs) with the interpreter the engines use. An
overload that has a converter but appears in no sample, or whose validator refused every node it appeared
in, is listed as "not measured". Without ``expecttest`` (``pip install -e '.[dev]'``) OpInfo cannot be
imported and nothing is measured.

Totals at the end: core overloads; with a converter; measured; whose emitted ONNX ops TensorRT's parser
all supports.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import logging
import operator
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from trtcheck.conversion import registry
from trtcheck.conversion.interpreter import segment_to_onnx
from trtcheck.conversion.ops.trt_onnx_ops import SOURCE, TENSORRT_ONNX_OPS, TENSORRT_VERSION
from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import is_getitem

DEFAULT_DTYPES = (torch.float32, torch.int64, torch.bool, torch.float16)


def core_overloads() -> list[torch._ops.OpOverload]:
    """Every ``aten`` overload the dispatcher knows that is tagged ``torch.Tag.core``, sorted by name.

    The dispatcher's list, not ``dir(torch.ops.aten)``: that lists only the packets looked up so far.
    """
    found = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = qualified.partition("::")
        if namespace != "aten":
            continue
        name, _, overload_name = rest.partition(".")
        try:
            overload = getattr(getattr(torch.ops.aten, name), overload_name or "default")
        except (AttributeError, RuntimeError):  # an overload Python cannot reach
            continue
        if torch.Tag.core in overload.tags:
            found.add(overload)
    return sorted(found, key=str)


# ---- one node converted alone ----------------------------------------------------------------------------


def node_alone(node: torch.fx.Node) -> torch.fx.GraphModule:
    """A GraphModule holding ``node`` only: each fx value it reads becomes a placeholder (same metadata;
    a constant stays a constant), and each Tensor of its result an output (``getitem`` for a tuple)."""
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    inputs: dict[torch.fx.Node, torch.fx.Node] = {}

    def placeholder(value: torch.fx.Node) -> torch.fx.Node:
        if value not in inputs:
            if value.op == "get_attr":  # a constant stays one: validators may ask for constant weights
                name = f"const_{len(inputs)}"
                root.register_buffer(name, operator.attrgetter(value.target)(value.graph.owning_module))
                new = graph.get_attr(name)
            else:
                new = graph.placeholder(f"in_{len(inputs)}")
            new.meta = dict(value.meta)
            inputs[value] = new
        return inputs[value]

    args = torch.fx.map_arg(node.args, placeholder)
    kwargs = torch.fx.map_arg(node.kwargs, placeholder)
    copy = graph.call_function(node.target, args, kwargs)
    copy.meta = dict(node.meta)
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        # only the results the graph reads: a validator may refuse a node whose other results are used
        used = {u.args[1] for u in node.users if is_getitem(u)}
        outputs = []
        for index, item in enumerate(value):
            if isinstance(item, torch.Tensor) and (not used or index in used):
                picked = graph.call_function(operator.getitem, (copy, index))
                picked.meta = {"val": item}
                outputs.append(picked)
        graph.output(tuple(outputs))
    else:
        graph.output(copy)
    return torch.fx.GraphModule(root, graph)


def emitted_ops(node: torch.fx.Node) -> frozenset[str]:
    """The ONNX op types ``node``'s converter emits for it (the interpreter's output Identities left out).

    Raises whatever conversion raises (``ConversionError`` for a refusal or a converter failure).
    """
    model = segment_to_onnx(node_alone(node))
    return frozenset(
        n.op_type
        for n in model.graph.node
        if not (n.op_type == "Identity" and all(o.startswith("output_") for o in n.output))
    )


# ---- observation on OpInfo samples ------------------------------------------------------------------------


@dataclass
class Observed:
    """What the samples showed of one overload: nodes seen, nodes converted, ONNX ops, failures."""

    nodes: int = 0
    converted: int = 0
    refused: int = 0
    onnx_ops: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


class OneOp(torch.nn.Module):
    """An OpInfo sample as a model: ``forward(*tensors)`` calls ``op(input, *args, **kwargs)`` with the
    sample's Tensors put back in place (its other arguments are constants of the graph). ``op_id`` names
    the op in a batch of samples. The OpInfo test suite builds its one-op models with it too."""

    def __init__(self, fn: Any, leaves: Sequence[Any], spec: Any, op_id: str = "") -> None:
        super().__init__()
        self.fn, self.spec, self.op_id = fn, spec, op_id
        self.constants = [None if isinstance(v, torch.Tensor) else v for v in leaves]
        self.positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.constants)
        for position, tensor in zip(self.positions, tensors):
            leaves[position] = tensor
        input, args, kwargs = tree_unflatten(leaves, self.spec)
        return self.fn(input, *args, **kwargs)


class _Batch(torch.nn.Module):
    def __init__(self, models: Sequence[tuple[OneOp, tuple]]) -> None:
        super().__init__()
        self.counts = [len(tensors) for _, tensors in models]
        for i, (model, _) in enumerate(models):
            self.add_module(f"s{i}", model)

    def forward(self, *tensors: torch.Tensor) -> tuple:
        outputs, start = [], 0
        for i, count in enumerate(self.counts):
            outputs.append(getattr(self, f"s{i}")(*tensors[start:start + count]))
            start += count
        return tuple(outputs)


def _opinfo_models(op_patterns: Sequence[str], dtypes: Sequence[torch.dtype], samples: int, first: int = 0
                   ) -> list[tuple[OneOp, tuple]]:
    """One-op models of OpInfo samples ``first`` to ``samples - 1`` per op and dtype that eager runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import (
            op_db,  # needs expecttest
        )
    models = []
    for op in op_db:
        name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        if not any(fnmatch.fnmatchcase(name, p) for p in op_patterns):
            continue
        for dtype in dtypes:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            torch.manual_seed(0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for index, sample in enumerate(op.sample_inputs_func(op, "cpu", dtype, False)):
                        if index >= samples:
                            break
                        if index < first:
                            continue
                        leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
                        tensors = tuple(v.detach().clone() for v in leaves if isinstance(v, torch.Tensor))
                        model = OneOp(op.op, leaves, spec, name)
                        with torch.no_grad():
                            model(*(t.clone() for t in tensors))  # eager must run it
                        models.append((model, tensors))
            except Exception:  # noqa: BLE001 - a sample eager (or OpInfo) cannot run measures nothing
                continue
    return models


def _lower(models: Sequence[tuple[OneOp, tuple]]) -> list[torch.fx.GraphModule]:
    """Lowered graphs of ``models`` (batched: lowering's cost is mostly per call); unexportable ones dropped."""
    if not models:
        return []
    tensors = tuple(t.clone() for _, ts in models for t in ts)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [lower(_Batch(models), tensors)]
    except Exception:  # noqa: BLE001 - some sample cannot be exported: halve until it is found
        if len(models) == 1:
            return []
        middle = len(models) // 2
        return _lower(models[:middle]) + _lower(models[middle:])


def observe(graphs: Iterable[torch.fx.GraphModule], into: dict[Any, Observed] | None = None) -> dict[Any, Observed]:
    """Convert every ATen node of ``graphs`` that has a converter, alone; what each overload emitted."""
    observed = into if into is not None else {}
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if registry.get(node.target) is None:
                continue
            entry = observed.setdefault(node.target, Observed())
            entry.nodes += 1
            judged = registry.verdict(node)
            if not judged:
                entry.refused += 1
                if judged.error is not None:
                    entry.errors.append(f"validator raised {type(judged.error).__name__}: {judged.error}")
                continue
            try:
                entry.onnx_ops |= emitted_ops(node)
                entry.converted += 1
            except Exception as error:  # noqa: BLE001 - a converter failing is what coverage must show
                entry.errors.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:200])
    return observed


def observe_opinfo(op_patterns: Sequence[str] = ("*",), dtypes: Sequence[torch.dtype] = DEFAULT_DTYPES,
                   samples: int = 1, batch_size: int = 48, more_samples: int = 12,
                   progress: Callable[[str], None] | None = None) -> dict[Any, Observed]:
    """``observe`` on the lowered graphs of OpInfo samples (empty when OpInfo cannot be imported).

    ``progress`` is told after each batch how many samples are done (every op takes a minute or more: a
    silent command looks hung).

    A second pass gives each core overload with a converter that no sample converted a second chance: the
    first ``more_samples`` samples of the OpInfo ops named like it (``argmax`` for ``aten.argmax.default``,
    ``max_pool2d`` for ``aten.max_pool2d_with_indices.default``).
    """
    try:
        models = _opinfo_models(op_patterns, dtypes, samples)
    except ImportError:
        return {}
    observed: dict[Any, Observed] = {}
    began = time.perf_counter()

    def measure(batch: list[tuple[OneOp, tuple]], done: int, total: int, what: str) -> None:
        observe(_lower(batch), observed)
        if progress is not None:
            progress(f"{what}: {done} of {total} ({time.perf_counter() - began:.0f} s)")

    for start in range(0, len(models), batch_size):
        measure(models[start:start + batch_size], min(start + batch_size, len(models)), len(models), "OpInfo samples measured")
    if more_samples > samples:
        core = set(core_overloads())  # others are decomposed away: no sample would show them
        missing = [
            t for t in registry.registered_targets()
            if t in core and not (t in observed and observed[t].converted)
        ]
        bases = {_base_name(t) for t in missing}
        patterns = [p for p in op_patterns if p != "*"] or ["*"]
        names = [f"*{base}*" for base in sorted(bases) if base]
        again = [m for m in _opinfo_models(names, dtypes, more_samples, samples) if _matches(m[0], patterns)]
        for start in range(0, len(again), batch_size):
            measure(again[start:start + batch_size], min(start + batch_size, len(again)), len(again), "more samples, unmeasured converters")
    return observed


def _base_name(overload: torch._ops.OpOverload) -> str:
    """``max_pool2d`` for ``aten.max_pool2d_with_indices.default``, ``batch_norm`` for ``_native_batch_norm_legit``."""
    name = overload.overloadpacket.__name__.strip("_")
    for prefix in ("native_", "unsafe_"):
        name = name.removeprefix(prefix)
    return name.split("_with_")[0].split("_legit")[0].split("_kernel")[0]


def _matches(model: OneOp, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(model.op_id, p) for p in patterns)


# ---- the report ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    overload: Any
    converter: bool
    onnx_ops: frozenset[str] = frozenset()
    measured: bool = False  # a sample node was converted
    errors: tuple[str, ...] = ()

    @property
    def unsupported(self) -> frozenset[str]:
        """Emitted ONNX op types TensorRT's parser does not list as supported."""
        return frozenset(op for op in self.onnx_ops if op not in TENSORRT_ONNX_OPS)

    @property
    def tensorrt_ok(self) -> bool:
        """Measured, and every ONNX op it emitted is supported by TensorRT's parser."""
        return self.converter and self.measured and not self.unsupported


@dataclass
class Coverage:
    rows: list[Row]
    extra: list[Row]  # converters for overloads outside the core opset
    measured_from: str
    not_measured_because: str = ""  # why nothing was measured (no expecttest): the totals say so instead of "measured: 0"

    @property
    def totals(self) -> dict[str, int]:
        return {
            "core overloads": len(self.rows),
            "with converter": sum(r.converter for r in self.rows),
            "measured": sum(r.converter and r.measured for r in self.rows),
            "TensorRT parser supports all emitted ops": sum(r.tensorrt_ok for r in self.rows),
            "converter failures seen": sum(bool(r.errors) for r in self.rows),
        }


def _row(overload: Any, observed: dict[Any, Observed]) -> Row:
    entry = observed.get(overload)
    return Row(
        overload,
        registry.get(overload) is not None,
        frozenset(entry.onnx_ops) if entry else frozenset(),
        bool(entry and entry.converted),
        tuple(dict.fromkeys(entry.errors))[:3] if entry else (),
    )


def coverage(observed: dict[Any, Observed] | None = None, measured_from: str = "") -> Coverage:
    """The coverage table; ``observed`` defaults to ``observe_opinfo()`` (a minute or two on 2 cores)."""
    if observed is None:
        observed = observe_opinfo()
        measured_from = measured_from or "OpInfo samples (first per op and dtype)"
    core = core_overloads()
    core_set = set(core)
    extra = sorted(
        (t for t in registry.registered_targets() if isinstance(t, torch._ops.OpOverload) and t not in core_set), key=str
    )
    return Coverage([_row(o, observed) for o in core], [_row(o, observed) for o in extra], measured_from)


def format_coverage(report: Coverage, verbose: bool = True) -> str:
    lines = [
        (
            f"Core ATen opset (torch {torch.__version__}, overloads tagged torch.Tag.core): converters and the ONNX "
            f"ops they emit, measured on {report.measured_from or 'the given graphs'}."
        ),
        f"TensorRT {TENSORRT_VERSION} ONNX parser support: {SOURCE}",
        "",
        f"{'overload':<48} {'converter':<10} {'TensorRT':<9} emitted ONNX ops",
    ]

    def line(row: Row) -> str:
        if not row.converter:
            return f"{row.overload!s:<48} {'-':<10} {'':<9}"
        if not row.measured:
            verdict, ops = "?", "not measured" + (f" ({row.errors[0]})" if row.errors else "")
        else:
            verdict = "yes" if row.tensorrt_ok else "NO"
            ops = ", ".join(sorted(row.onnx_ops)) or "(none: a pass-through)"
            if row.unsupported:
                ops += f"  [unsupported: {', '.join(sorted(row.unsupported))}]"
            if row.errors:
                ops += f"  [failed: {row.errors[0]}]"
        return f"{row.overload!s:<48} {'yes':<10} {verdict:<9} {ops}"

    if verbose:
        lines += [line(r) for r in report.rows]
        if report.extra:
            lines += ["", f"Converters outside the core opset ({len(report.extra)}):"]
            lines += [line(r) for r in report.extra]
    lines += ["", "Totals:"]
    unmeasured = {"measured", "TensorRT parser supports all emitted ops", "converter failures seen"}
    lines += [
        f"  {name}: not measured ({report.not_measured_because})" if report.not_measured_because and name in unmeasured
        else f"  {name}: {count}"
        for name, count in report.totals.items()
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Converter coverage of the core ATen opset, measured on OpInfo samples.")
    parser.add_argument("--ops", default="*", help="OpInfo op names or globs to measure on, comma separated")
    parser.add_argument("--samples", type=int, default=1, help="OpInfo samples per op and dtype (default 1)")
    parser.add_argument("--totals", action="store_true", help="print the totals only")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch._logging.set_logs(all=logging.ERROR)  # no graph dumps from export failures on stderr
    start = time.perf_counter()
    patterns = [p.strip() for p in args.ops.split(",") if p.strip()]
    why = "" if importlib.util.find_spec("expecttest") is not None else "expecttest is not installed: pip install expecttest"
    if why:  # OpInfo needs it; say so at once rather than after a minute of importing torch's test suite
        print(f"trtcheck coverage: {why} (or trtcheck[dev]) to measure the ONNX ops on OpInfo samples; listing the converters only",
              file=sys.stderr)
        observed: dict[Any, Observed] = {}
    else:
        observed = observe_opinfo(patterns, samples=args.samples, progress=lambda text: print(f"trtcheck coverage: {text}",
                                                                                               file=sys.stderr, flush=True))
        if not observed:
            print("warning: no OpInfo sample measured", file=sys.stderr)
    samples = "first sample" if args.samples == 1 else f"first {args.samples} samples"
    report = coverage(observed, f"OpInfo samples ({samples} per op and dtype{'' if args.ops == '*' else ', ops ' + args.ops})")
    report.not_measured_because = why
    print(format_coverage(report, verbose=not args.totals))
    print(f"  ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
