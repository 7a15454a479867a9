"""Reduction: shrink a mismatch to the smallest set of nodes that still fails, and write it as a standalone repro.

Localization names the first op whose error fails; a developer fixing a converter wants more: a repro of a few
nodes, with real input values, that runs without the model's code, and *every* independent culprit, not the
first. Delta debugging (Zeller's ddmin) gets both from one primitive, ``probes.check_nodes``: a set of nodes
of the lowered graph, any set, contiguous or not, cut out as a sub-engine and fed eager's recorded values
(golden boundary values) at every cut, fails when one of its outputs fails the check ``verify`` makes. ddmin
shrinks the TensorRT nodes to a 1-minimal failing set (removing any one node makes it pass); that set is then
excluded and the search runs again on the rest, until the rest passes: each round is one independent culprit.

A set that does not convert or run (an engine error) does not fail "the same check", so ddmin never reduces
towards it. Each culprit's repro folder (``write_reduced_repro``) holds ``repro.py`` (prints FAIL or PASS,
exits 1 or 0), ``subgraph.pt`` (the nodes as a ``GraphModule``, their metadata kept), ``inputs.pt`` (the real
values at the cut), ``settings.json`` (backend, tolerances, the nodes and ops) and ``graph.py`` (readable code); the
folder is written and read by ``repro`` (``write_subgraph_repro``), as a failing verify's folder is (``load_repro``).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.pipeline import compile_request
from trtcheck.compiler.request import CompileRequest
from trtcheck.lowering.export import Source, source_of
from trtcheck.lowering.graph import flat_inputs
from trtcheck.lowering.quantized import eager_quantizers
from trtcheck.names import from_source, node_source
from trtcheck.partitioning.nodes import branch_names, in_branch
from trtcheck.partitioning.reasons import Target
from trtcheck.settings import Settings
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.inputs import InputSet, cloned, compared_input_sets
from trtcheck.verification.judge import Judge
from trtcheck.verification.localize import localize
from trtcheck.verification.probes import Budget, check_nodes, engine_of, normalised, subgraph_module
from trtcheck.verification.quantizers import quantizer_checks
from trtcheck.verification.recorded_converters import register_recorded_converters
from trtcheck.verification.recording import Values, record_eager
from trtcheck.verification.repro import ReproCase, load_repro, settings_to_json, write_subgraph_repro
from trtcheck.verification.state import compiled_state, snapshot_state

__all__ = [  # ReproCase, load_repro and register_recorded_converters are repro's: `trtcheck reduce DIR` takes them from here
    "Reduced", "ReproCase", "Reduction", "check_subgraph", "ddmin", "load_repro", "reduce_compiled", "reduce_graph",
    "reduce_model", "register_recorded_converters", "tensorrt_nodes", "write_reduced_repro",
]


def ddmin(items: Sequence[Any], fails: Callable[[list[Any]], bool], budget: Budget | None = None) -> list[Any]:
    """A 1-minimal sublist of ``items`` (which ``fails``) that still ``fails`` (Zeller and Hildebrandt, 2002).

    Tries each of ``n`` chunks, then each complement, doubling ``n`` when neither fails; chunks keep the items'
    order, complements are arbitrary sets. Stops early when ``budget`` is spent (the list so far still fails)."""
    items = list(items)
    tried: dict[frozenset, bool] = {}

    def failing(subset: list[Any]) -> bool:  # a set already tried is not built again
        key = frozenset(subset)
        if key not in tried:
            tried[key] = fails(subset)
        return tried[key]

    n = 2
    while len(items) >= 2 and not (budget is not None and budget.spent):
        size = len(items) / n
        chunks = [items[round(i * size):round((i + 1) * size)] for i in range(n)]
        chunks = [chunk for chunk in chunks if chunk]
        reduced = False
        for chunk in chunks:
            if failing(chunk):
                items, n, reduced = chunk, 2, True
                break
        if not reduced and len(chunks) > 2:
            for index in range(len(chunks)):
                rest = [item for j, chunk in enumerate(chunks) if j != index for item in chunk]
                if failing(rest):
                    items, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(items):
                break
            n = min(2 * n, len(items))
    return items


@dataclass
class Reduced:
    """One independent culprit: the smallest set of nodes that still fails, and where its repro was written."""

    nodes: list[str]
    ops: list[str]
    failure: str  # the first failing output's message
    repro: pathlib.Path | None = None
    where: str = ""  # the control-flow branch its nodes are in ("" for the lowered graph), as localization names it
    sources: list[str] = field(default_factory=list)  # where in the user's code its nodes came from (``names.node_source``),
    # each once, in the nodes' order: ``layers.1 (Block), model.py:23``

    def __str__(self) -> str:
        repro = f"; repro: python {self.repro / 'repro.py'}" if self.repro is not None else ""
        listed = ", ".join(f"{node} = {op}" for node, op in zip(self.nodes, self.ops))
        inside = f" in {self.where}" if self.where else ""
        sources = f" ({'; '.join(map(from_source, self.sources))})" if self.sources else ""
        return f"{len(self.nodes)} node(s){inside}: {listed}{sources}: {self.failure}{repro}"


@dataclass
class Reduction:
    """Every independent culprit ``reduce_graph`` found, and what it cost."""

    culprits: list[Reduced] = field(default_factory=list)
    candidates: int = 0
    tests: int = 0
    seconds: float = 0.0
    cut_short: bool = False
    notes: list[str] = field(default_factory=list)
    mismatch: str | None = None  # reduce_model: the compiled model's first output that differs from eager's
    unreduced: list[str] = field(default_factory=list)  # the branches with engines a mismatch may be inside

    @property
    def failed(self) -> bool:
        """A culprit was found, or the compiled outputs differ from eager's (culprits found or not): never a pass
        for a model whose outputs do not match."""
        return bool(self.culprits) or self.mismatch is not None

    def __str__(self) -> str:
        lines = [f"reduction of {self.candidates} TensorRT nodes: {len(self.culprits)} independent culprit(s), "
                 f"{self.tests} sub-engines, {self.seconds:.1f} s{', cut short by its time budget' if self.cut_short else ''}"]
        lines += [f"  culprit {index}: {culprit}" for index, culprit in enumerate(self.culprits, 1)]
        if self.mismatch is not None and not self.culprits:
            lines.append(f"  the compiled outputs differ from eager's, and no culprit was found: {self.mismatch}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


@torch.no_grad()  # eager's recorded values include views of parameters: see localize.localize
def reduce_graph(
    gm: torch.fx.GraphModule,
    values: Values,
    candidates: Sequence[torch.fx.Node],
    backend: str,
    rtol: float | None = None,
    atol: float | None = None,
    *,
    budget: float | None = None,
    max_culprits: int = 8,
    out_dir: str | os.PathLike | None = None,
    settings: Settings | None = None,
) -> Reduction:
    """Every independent culprit among ``candidates`` (nodes of ``gm``), each reduced by ddmin to a 1-minimal set
    that fails the check on ``values`` (eager's value of every node: ``recording.record_eager``); with ``out_dir``,
    each is written as a standalone repro folder ``out_dir/culprit_<k>``. ``settings``: the compiled partition's; below
    fp32 (or with TF32) every set is built with them and judged at that precision (``probes.check_nodes``)."""
    clock = Budget(budget)
    found = Reduction(candidates=len(candidates))
    results: dict[frozenset, bool] = {}
    judge = Judge.of(settings, rtol, atol).for_graph(gm)  # the one rule every set is judged by (quantized: its own)

    def fails(nodes: list[torch.fx.Node]) -> bool:
        key = frozenset(normalised(nodes))
        if key not in results:
            found.tests += 1
            check = check_nodes(gm, list(key), values, backend, judge, settings=settings)
            results[key] = check.comparison is not None and not check.comparison.passed
        return results[key]

    remaining = list(candidates)
    while remaining and len(found.culprits) < max_culprits and not clock.spent and fails(remaining):
        smallest = normalised(ddmin(remaining, fails, clock))
        check = check_nodes(gm, smallest, values, backend, judge, settings=settings)
        failure = next((o.message for o in check.comparison.outputs if not o.passed), "") if check.comparison else check.error
        sources = list(dict.fromkeys(source for source in map(node_source, smallest) if source))
        culprit = Reduced([n.name for n in smallest], [str(n.target) for n in smallest], failure, sources=sources)
        if out_dir is not None:
            culprit.repro = write_reduced_repro(
                pathlib.Path(out_dir) / f"culprit_{len(found.culprits) + 1}", gm, smallest, values, backend, rtol, atol, failure,
                settings)
        found.culprits.append(culprit)
        taken = set(smallest)
        remaining = [node for node in remaining if node not in taken]
    found.cut_short, found.seconds = clock.cut_short, clock.elapsed
    return found


def tensorrt_nodes(compiled: Any) -> list[torch.fx.Node]:
    """The nodes a compiled module runs in engines: the candidates of a reduction, in graph order. ``compiled`` is
    anything with a ``partition`` and its ``engines`` by segment index: a ``CompiledModule``, or a control-flow
    branch as localization walked it (``walk.WalkedGraph``)."""
    partition = compiled.partition
    nodes = [node for index, segment in enumerate(partition.segments)
             if segment.target is Target.TENSORRT and index in compiled.engines for node in segment.nodes]
    return normalised(nodes)


@torch.no_grad()  # eager's recorded values include views of parameters: see localize.localize
def reduce_compiled(
    compiled: Any,
    flat: Sequence[Any],
    backend: str,
    rtol: float | None = None,
    atol: float | None = None,
    **options: Any,
) -> Reduction:
    """``reduce_graph`` over the TensorRT nodes of ``compiled`` (a ``CompiledModule``) on ``flat`` (the lowered
    graph's placeholders' values), eager's values recorded first."""
    gm = compiled.partition.graph_module
    values = record_eager(gm, flat)
    options.setdefault("settings", compiled.partition.settings)
    return reduce_graph(gm, values, tensorrt_nodes(compiled), backend, rtol, atol, **options)


def reduce_model(
    model: Any,
    example_inputs: Sequence[Any] | None = None,
    settings: Settings | None = None,
    backend: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    *,
    num_inputs: int = 3,
    seed: int = 0,
    example_kwargs: Mapping[str, Any] | None = None,
    inputs: Sequence[InputSet] | None = None,
    dynamic_shapes: Any = None,
    **options: Any,
) -> Reduction:
    """Compile ``model`` (as ``verify`` does, with ``dynamic_shapes``), find the first input set whose outputs differ
    from eager's (``verify``'s sets: the examples, then ``inputs`` or sets drawn like ``verify``'s), and reduce the
    mismatch on it. A model whose outputs all match has nothing to reduce: an empty ``Reduction`` that says so."""
    request = CompileRequest(settings, backend, dynamic_shapes=dynamic_shapes)  # checked once, before any work
    source = source_of(model, example_inputs, example_kwargs)
    with eager_quantizers(source.eager):  # NVFP4 quantizers ModelOpt runs only with CUDA compute TensorRT's arithmetic
        return _reduce_source(source, request, rtol, atol, inputs, num_inputs, seed, options)


def _reduce_source(source: Source, request: CompileRequest, rtol: float | None, atol: float | None,
                   inputs: Sequence[InputSet] | None, num_inputs: int, seed: int, options: Mapping[str, Any]) -> Reduction:
    """``reduce_model`` on a bound source: the first input set whose outputs differ, or (a quantized model whose
    outputs all pass) the first set, where a quantizer's codes differ from TensorRT's arithmetic."""
    backend = request.backend
    compiled = compile_request(source.lowerable, source.example_args, request, source.example_kwargs)
    kwargs = dict(source.example_kwargs or {})
    judge = Judge.of_partition(compiled.partition, rtol, atol)
    stateful = bool(compiled_state(compiled))
    sets = [input_set for _, input_set in compared_input_sets(compiled.signature, source.example_args, inputs, num_inputs, seed)]
    for input_set in sets:
        state = snapshot_state(source.eager) if stateful else None
        with torch.no_grad():
            expected = source.eager(*cloned(input_set), **cloned(kwargs))
            actual = compiled(*cloned(input_set), **cloned(kwargs))
        comparison = judge.compare(expected, actual)
        # judged as verify judges it: a correct fp16 model (or a float32 one rounding beyond the tolerances) is no mismatch
        judge.judge_call(comparison, source.eager, input_set, kwargs, expected, actual, state)
        if not comparison.passed:
            mismatch = next((o.message for o in comparison.outputs if not o.passed), "an output differs")
            return _reduce_on(compiled, input_set, kwargs, mismatch, backend, rtol, atol, options)
    if judge.quantized:  # outputs within rounding can hide a wrong quantizer: its codes do not (verify's check)
        wrong = [check for check in quantizer_checks(compiled, sets[0], kwargs, backend) if not check.passed]
        if wrong:
            return _reduce_on(compiled, sets[0], kwargs, str(wrong[0]), backend, rtol, atol, options)
    return Reduction(candidates=len(tensorrt_nodes(compiled)), notes=["the compiled outputs match eager's: nothing to reduce"])


def _reduce_on(compiled: Any, input_set: InputSet, kwargs: Mapping[str, Any], mismatch: str, backend: str,
               rtol: float | None, atol: float | None, options: Mapping[str, Any]) -> Reduction:
    """The mismatch ``mismatch`` on ``input_set`` reduced to its culprits (``reduce_graph``), in control-flow branches
    when the top level explains none."""
    flat = flat_inputs(compiled.partition.graph_module, input_set, kwargs)
    gm = compiled.partition.graph_module
    with torch.no_grad():  # as reduce_compiled does, the values kept to tell which branch ran
        values = record_eager(gm, flat)
        reduction = reduce_graph(gm, values, tensorrt_nodes(compiled), backend, rtol, atol,
                                 settings=compiled.partition.settings, **options)
    reduction.mismatch = mismatch
    reduction.unreduced = branches_with_engines(compiled.partition, _branches_taken(gm, values))
    inside = None
    if not reduction.culprits and reduction.unreduced and not reduction.cut_short:
        inside = _reduce_in_branch(reduction, compiled, flat, backend, rtol, atol, dict(options))
    if not reduction.culprits:
        reduction.notes.append(_unexplained(reduction, inside))
    return reduction


def branches_with_engines(partition: Any, taken: Mapping[str, bool] | None = None, path: str = "") -> list[str]:
    """The control-flow branches of ``partition`` (nested ones as ``outer/inner``) that run TensorRT segments, each
    as ``"true_graph_0 (of cond node 'cond')"``: where a mismatch the top-level nodes do not explain may be.
    ``taken`` (``_branches_taken``) leaves out the top-level cond branches the input did not take."""
    found = []
    for node in partition.graph_module.graph.nodes:
        for name in branch_names(node):
            sub = partition.branches.get(name)
            if sub is None or (taken is not None and taken.get(name) is False):
                continue
            where = in_branch(path, name)
            if any(segment.target is Target.TENSORRT for segment in sub.segments):
                op = getattr(node.target, "__name__", str(node.target))
                ran = ", the branch this input took" if taken is not None and taken.get(name) else ""
                found.append(f"{where} (of {op} node {node.name!r}{ran})")
            found += branches_with_engines(sub, None, where)
    return found


def _branches_taken(gm: torch.fx.GraphModule, values: Values) -> dict[str, bool]:
    """For each top-level ``torch.cond`` of ``gm`` whose predicate eager recorded: its branches, by name, and
    whether the input took each."""
    taken: dict[str, bool] = {}
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.higher_order.cond):
        pred = node.args[0]
        value = values.get(pred) if isinstance(pred, torch.fx.Node) else pred
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = bool(value.item())
        if isinstance(value, bool):
            true_name, false_name = branch_names(node)[:2]
            taken[true_name], taken[false_name] = value, not value
    return taken


def _reduce_in_branch(
    reduction: Reduction, compiled: Any, flat: Sequence[Any], backend: str, rtol: float | None, atol: float | None,
    options: Mapping[str, Any],
) -> str | None:
    """No set of top-level TensorRT nodes fails, and branches run engines: the branch localization finds the culprit
    in (``Localization.culprit_graph``: the branch taken, the loop iteration) is reduced as the lowered graph is, on
    eager's values inside it, its culprits (and repros) added to ``reduction``. Only that branch: an independent
    culprit in another branch, or in a later iteration, is found once this one is fixed. Returns where it reduced
    (None: localization found no engine failing inside a branch)."""
    found = localize(compiled, flat, backend, budget=options.get("budget"), judge=Judge.of_partition(compiled.partition, rtol, atol))
    graph = found.culprit_graph
    if graph is None or not graph.where:
        return None
    inside = reduce_graph(graph.gm, graph.eager, tensorrt_nodes(graph), backend, rtol, atol,
                          settings=compiled.partition.settings, **options)
    for culprit in inside.culprits:
        culprit.where = graph.where
    reduction.culprits += inside.culprits
    reduction.candidates += inside.candidates
    reduction.tests += inside.tests + found.sub_engines
    reduction.cut_short = reduction.cut_short or inside.cut_short or found.cut_short
    reduction.seconds += inside.seconds + found.seconds
    if inside.culprits:
        reduction.notes.append(f"no top-level set fails: reduced inside {graph.where}, where localization found the "
                               "culprit; other branches and later iterations were not reduced")
    return graph.where


def _unexplained(reduction: Reduction, inside: str | None = None) -> str:
    """Why a mismatch gave no culprit, and that it is still a failure; ``inside``: the branch reduced in vain."""
    if reduction.cut_short:
        return "the time budget ran out before a culprit was found: rerun with a larger --budget"
    if inside is not None:
        return (f"localization finds an engine failing on eager's values in {inside}, but no set of its TensorRT nodes "
                "fails on its own as a sub-engine: the error comes from how the engine runs its ops together")
    if reduction.unreduced:
        return (f"no set of top-level TensorRT nodes fails on its own, and localization found no engine failing on "
                f"eager's values inside the engines of {', '.join(reduction.unreduced)} either: the mismatch is "
                "rounding accumulated across engines, or comes from what runs in PyTorch")
    return ("no set of TensorRT nodes fails on its own against eager's values at its cut: the mismatch is rounding "
            "accumulated across engines, or comes from what runs in PyTorch")


# ------------------------------------------------------------------------------------------- the repro


def check_subgraph(module: torch.fx.GraphModule, inputs: Sequence[Any], backend: str, rtol: float | None, atol: float | None,
                   settings: Settings | Mapping[str, Any] | None = None) -> Comparison:
    """The check a reduced repro makes: ``module`` as an engine on ``inputs`` against ``module`` in PyTorch, every output
    compared, built and judged at ``settings`` (the failure's: its precision, ``fp32_nodes``, TF32; a ``settings.json``
    mapping as a repro folder holds them; None, as a folder written before them: float32) as ``reduce`` judged it."""
    if isinstance(settings, Mapping):
        settings = Settings(**settings)
    with torch.no_grad():
        expected = list(module(*inputs))
        engine = engine_of(module, list(inputs), expected, backend, settings)
        actual = list(engine(*inputs))
    judge = Judge.of(settings, rtol, atol).for_graph(module)
    comparison, _ = judge.judge_engine(module, list(inputs), expected, actual)
    return comparison


@torch.no_grad()  # eager's recorded values include views of parameters: see localize.localize
def write_reduced_repro(
    folder: str | os.PathLike,
    gm: torch.fx.GraphModule,
    nodes: Sequence[torch.fx.Node],
    values: Values,
    backend: str,
    rtol: float | None,
    atol: float | None,
    failure: str = "",
    settings: Settings | None = None,
) -> pathlib.Path:
    """Write ``nodes`` of ``gm``, fed ``values`` at their cut, as a standalone repro folder (module docstring;
    ``repro.write_subgraph_repro`` writes it) that replays at ``settings``, the failure's."""
    chosen = normalised(nodes)
    module, inputs = subgraph_module(gm, chosen, values)
    fed = tuple(values[node].contiguous() if isinstance(values[node], torch.Tensor) else values[node] for node in inputs)
    config = {
        "backend": backend, "rtol": rtol, "atol": atol, "failure": failure,
        "nodes": [node.name for node in chosen], "ops": [str(node.target) for node in chosen],
        "settings": settings_to_json(settings) if settings is not None else None,
    }
    return write_subgraph_repro(folder, module, fed, config)
