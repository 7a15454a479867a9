"""``trtcheck.verify``: compile a model, then prove the result sound (invariants) and right (equivalence).

One call does what a downstream test needs: it compiles, checks every invariant of the partition and of
the stitched graph, runs eager and stitched side by side on several inputs, and on any failure raises a
``VerificationError`` (an ``AssertionError``, so pytest reports a failure, not an error) whose report says
where each node runs and why, what differs, and where the standalone repro was written.

``verify`` is a driver: its options become one ``VerifyRequest`` (checked before anything runs), then each check
family runs in turn, each in its own module: the partition's invariants (``invariants``), the stitched graph's
(``stitched``), the model's state (``state``), determinism (``determinism``), the call modes (``modes``),
equivalence on every input set (``comparisons``, measured by ``equivalence`` and judged by the request's one
``judge``), the fp16/bf16 ranges (``ranges``), then, on a failure, localization (``localize``) and the repro (``repro``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from trtcheck.compiler.pipeline import compile_request
from trtcheck.dynamo.frontend import through_compile
from trtcheck.engines import describe_backend
from trtcheck.errors import ExportRefusedError, VerificationError
from trtcheck.lowering.export import Source, source_of
from trtcheck.lowering.quantized import eager_quantizers
from trtcheck.partitioning.decisions import Support
from trtcheck.runtime.module import CompiledModule
from trtcheck.settings import Settings
from trtcheck.verification.comparisons import compare_on_input_sets, scalar_input_violations
from trtcheck.verification.determinism import (
    check_compiled_is_deterministic,
    check_eager_is_deterministic,
    determinism_violations,
    specialization_violations,
)
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.graph_breaks import GraphBreakReport, verify_across_breaks
from trtcheck.verification.inputs import InputSet, compared_input_sets
from trtcheck.verification.invariants import Violation, check_invariants, fallback_violations, segment_count_violations
from trtcheck.verification.localize import localized
from trtcheck.verification.modes import call_mode_violations, grad_mode_violations, mode_output_violations
from trtcheck.verification.quantizers import quantization_costs, quantizer_checks
from trtcheck.verification.ranges import clamped_outputs, compiled_range_findings, fp32_fix
from trtcheck.verification.report import VerificationReport
from trtcheck.verification.repro import write_repro
from trtcheck.verification.request import VerifyRequest
from trtcheck.verification.state import live_state, restore_state, snapshot_state, state_violations
from trtcheck.verification.stitched import stitched_graph_violations

__all__ = ["VerificationReport", "VerifyRequest", "stitched_graph_violations", "verify", "verify_request"]


def verify(
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None = None,
    settings: Settings | None = None,
    backend: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    num_inputs: int = 3,
    *,
    inputs: Sequence[InputSet] | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    allow_fallbacks: bool = False,
    lowered: torch.fx.GraphModule | None = None,
    support: Support = None,
    seed: int = 0,
    report_dir: str | os.PathLike | None = None,
    name: str | None = None,
    dynamic_shapes: Any = None,
    reference: bool = True,
    localize_budget: float = 60.0,
    eager_cache: EagerCache | None = None,
    frontend: str = "auto",
    dynamic: bool | None = False,
) -> VerificationReport | GraphBreakReport:
    """Compile ``model`` and check it; raise ``VerificationError`` on any violation or mismatch.

    What it checks, each check's why, and the report: docs/api.md#verify. The arguments:

    ``model`` is an ``nn.Module``, a ``torch.export.ExportedProgram`` (compiled as exported, compared with
    ``program.module()``) or a ``.pt2`` file's path; a program's stored example inputs serve when
    ``example_inputs`` is None.

    Input sets: ``example_inputs``, the same again (a second call of the compiled module must still be right: state,
    caches), then ``inputs`` when given, else ``num_inputs - 1`` random sets drawn like the examples, seeded by
    ``seed`` (``inputs.draw_like``; non-Tensor inputs are varied too, and the compiled module must match eager or
    refuse the call with ``InputMismatchError``). A model whose inputs are constrained (positive-definite, in a range)
    passes its own ``inputs``: eager failing on a generated set is an ``InputDomainError`` saying so. With
    ``dynamic_shapes`` (torch.export's argument) the sets also include every dynamic size at its minimum, at its
    maximum and at random sizes in range (docs/dynamic-shapes.md).

    Eager runs twice on the examples first: a model that disagrees with itself (dropout in training mode, random ops)
    raises ``NondeterministicModelError`` naming its random ops, since comparing with it tells nothing about the
    conversion. The model's parameters and buffers are compared before and after ``compile``, and restored when
    ``verify`` returns.

    A TensorRT segment that fell back to PyTorch (its conversion or engine build failed) is lost coverage, so it fails
    verification unless ``allow_fallbacks``. ``rtol``/``atol`` default to the output dtype's tolerances
    (``equivalence.default_tolerances``); an output outside them is judged again against eager in float64 when
    ``reference`` (default on), passing when at most ``equivalence.REFERENCE_MULTIPLE`` times as far from float64 as
    eager itself (the report gives the ratio). ``report_dir``: where a failure writes a standalone repro. ``lowered``:
    ``lower(model, example_inputs)`` made earlier (``LoweringCache``); partitioning and conversion are repeated from
    copies of it. ``localize_budget``: seconds to localize a mismatch on the first failing input set (each TensorRT
    segment's local and accumulated error, the first op whose own error fails; 0: not localized), which the report
    prints and the repro folder keeps as ``localization.txt``. ``eager_cache`` (an ``EagerCache``): eager's outputs
    kept from an earlier verify of the same model, in the same state, on the same input sets, so that one model
    verified under several settings runs eager once (checked bit for bit on the examples, else emptied; a model that
    differs empties it first).

    ``frontend``: ``"export"`` (one graph), ``"compile"`` (torch.compile's graphs, ``dynamic`` its option: a
    ``GraphBreakReport``, docs/graph-breaks.md) or ``"auto"``: export, and compile where export refuses the model.

    A bad option (``num_inputs=0``, ``rtol="1e-3"``, ``localize_budget=None``) is a ``ValueError`` or ``TypeError``
    naming it and the fix, raised before the model is lowered or run (``VerifyRequest``).
    """
    __tracebackhide__ = True  # pytest shows the report (the error's message), not this function's source and locals
    request = VerifyRequest(
        settings=settings, backend=backend, rtol=rtol, atol=atol, num_inputs=num_inputs, inputs=inputs,
        allow_fallbacks=allow_fallbacks, lowered=lowered, support=support, seed=seed, report_dir=report_dir, name=name,
        dynamic_shapes=dynamic_shapes, reference=reference, localize_budget=localize_budget, eager_cache=eager_cache,
        frontend=frontend, dynamic=dynamic,
    )
    return verify_request(model, example_inputs, request, example_kwargs)


def verify_request(
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None,
    request: VerifyRequest,
    example_kwargs: Mapping[str, Any] | None = None,
) -> VerificationReport | GraphBreakReport:
    """``verify`` with its options as a ``VerifyRequest`` (one request serves many models, or a changed copy of it,
    ``dataclasses.replace``, the next call): compile, run every check family, write the repro of a failure, and
    raise ``VerificationError`` on any violation or mismatch."""
    __tracebackhide__ = True
    engine = describe_backend(request.backend)  # which backend runs and why (auto), with versions and device
    source = source_of(model, example_inputs, example_kwargs)  # an ExportedProgram or .pt2: eager runs program.module()
    eager, args, kwargs = source.eager, source.example_args, source.example_kwargs
    before = snapshot_state(eager)
    cache = request.eager_cache if request.eager_cache is not None else EagerCache()
    cache.bind(eager, before)
    if through_compile(source.lowerable, request.frontend, "verify"):
        return verify_across_breaks(eager, args, kwargs, request, _verified_graph, dynamic=request.dynamic)
    with eager_quantizers(eager):  # NVFP4 quantizers ModelOpt runs only with CUDA compute TensorRT's arithmetic here
        try:
            return _verified(source, eager, args, kwargs, before, cache, request, engine)
        except ExportRefusedError as error:
            if request.frontend != "auto" or isinstance(source.lowerable, torch.export.ExportedProgram):
                raise
            refused = str(error).splitlines()[0]
    note = f"{refused}; frontend='auto' verified it through torch.compile's graphs instead, as torch.compile(backend='tensorrt') deploys it"
    return verify_across_breaks(eager, args, kwargs, request, _verified_graph, dynamic=request.dynamic, note=note)


def _verified_graph(graph: torch.fx.GraphModule, example_inputs: tuple, request: VerifyRequest) -> VerificationReport:
    """One graph torch.compile captured, verified as a model of its own (through torch.export: a captured graph has
    no graph break left in it)."""
    __tracebackhide__ = True
    return verify_request(graph, example_inputs, dataclasses.replace(request, frontend="export"))


def _verified(source: Source, eager: torch.nn.Module, args: tuple, kwargs: dict, before: Mapping[str, torch.Tensor],
              cache: EagerCache, request: VerifyRequest, engine: Any) -> VerificationReport:
    """``verify_request``'s checks, in order, on a bound eager model."""
    __tracebackhide__ = True
    try:
        compiled = compile_request(source.lowerable, args, request.compile_request, kwargs)
        request = request.judged_by(request.judge.for_graph(compiled.partition.graph_module))  # quantized: its rule
        report = VerificationReport(request.name or type(source.lowerable).__name__, request.settings, request.resolved_backend,
                                    compiled.partition, compile_times=compiled.compile_times, engine=engine)
        report.violations = _soundness_violations(compiled, source, request, before)
        on_examples = check_eager_is_deterministic(eager, args, kwargs, before, compiled.partition, cache)
        check_compiled_is_deterministic(compiled, eager, args, kwargs)
        mode_violations = grad_mode_violations(eager, args, kwargs, before, request.rtol, request.atol, inference=on_examples, cache=cache)
        report.violations += mode_violations
        labelled = compared_input_sets(compiled.signature, args, request.inputs, request.num_inputs, request.seed)
        report.input_sets, input_sets = [label for label, _ in labelled], [s for _, s in labelled]
        call_violations, in_modes = call_mode_violations(compiled, input_sets[0], kwargs)
        report.violations += call_violations
        # eager differs between modes (mode_violations): compare with what was traced, autograd on
        compared = compare_on_input_sets(compiled, eager, input_sets, kwargs, request, cache, on_examples, grad=bool(mode_violations))
        report.comparisons, report.notes = compared.comparisons, report.notes + compared.notes
        report.violations += mode_output_violations(in_modes, compared.first, request.rtol, request.atol)
        report.violations += scalar_input_violations(eager, compiled, args, kwargs, request.judge)
        if request.judge.narrows_range:  # fp16/bf16 leave float32's range; tf32 keeps it, nothing to find
            report.range_findings, note = compiled_range_findings(compiled, args, kwargs, request.judge.precision)
            clamped_outputs(compiled.partition.graph_module, report.comparisons, report.range_findings, request.judge.precision)
            if report.range_findings and not all(comparison.passed for comparison in report.comparisons):
                report.range_fix = fp32_fix(compiled.partition.graph_module, report.range_findings)
                report.range_fix_holds = _fix_holds(source, args, kwargs, request, report.range_fix)
            report.notes += [note] if note else []
        if request.judge.quantized:
            report.quantizers = quantizer_checks(compiled, input_sets[0], kwargs, request.resolved_backend)
            report.quantization = quantization_costs(compiled, input_sets[0], kwargs) if request.reference else None
            report.violations += [Violation("quantizer", str(check), node=check.node) for check in report.quantizers
                                  if not check.passed]
        failing = next((i for i, comparison in enumerate(report.comparisons) if not comparison.passed), None)
        if failing is None and any(not check.passed for check in report.quantizers):
            failing = 0  # outputs within rounding can hide a wrong quantizer (an NVFP4 step is large): its codes do not
        if failing is not None and request.localize_budget > 0:
            report.localization = localized(compiled, input_sets[failing], kwargs, request.resolved_backend, request.judge,
                                            request.localize_budget)
    finally:
        restore_state(eager, before)
    if not report.passed:
        if request.report_dir is not None:
            report.repro = _write_repro(report, compiled, source, input_sets, request)
        raise VerificationError(report)
    return report


def _fix_holds(source: Source, args: tuple, kwargs: dict, request: VerifyRequest, fix: Sequence[str]) -> bool | None:
    """Whether ``verify`` passes with ``fix`` kept in float32 besides the request's ``fp32_nodes``: every fix a report
    prints is checked before it is printed (an overflowing sum's origin alone, once advised, failed again: its result
    was cast back down for ``sqrt``). None: not checked (``request.check_fix`` off, or the check could not run)."""
    if not request.check_fix or not fix:
        return None
    settings = dataclasses.replace(request.settings, fp32_nodes=list(dict.fromkeys([*request.settings.fp32_nodes, *fix])))
    checking = dataclasses.replace(request, settings=settings, localize_budget=0, report_dir=None).fix_unchecked()
    try:
        verify_request(source.lowerable, args, checking, kwargs)
    except VerificationError:
        return False
    except Exception:  # noqa: BLE001 - a check of advice must never replace the failure it advises on
        return None
    return True


def _soundness_violations(
    compiled: CompiledModule, source: Source, request: VerifyRequest, before: Mapping[str, torch.Tensor]
) -> list[Violation]:
    """Every violation of the compiled module's soundness, before any comparison: the partition's invariants, the
    stitched graph's, the model's state after compile, determinism from scratch, no dynamic size fixed by compiling
    (after converting again too), and no fallback unless the request allows them."""
    partition = compiled.partition
    found = check_invariants(partition, request.support) + stitched_graph_violations(compiled.graph_module)
    found += segment_count_violations(partition)
    found += state_violations(before, live_state(source.eager), "compile")
    found += determinism_violations(compiled, source.lowerable, source.example_args, source.example_kwargs,
                                    request.compile_request)
    found += specialization_violations(compiled.conversion.graph_module)
    return found + ([] if request.allow_fallbacks else fallback_violations(partition))


def _write_repro(
    report: VerificationReport, compiled: CompiledModule, source: Source, input_sets: list[tuple], request: VerifyRequest
) -> Path | None:
    """The failure's repro folder (``repro.write_repro``): the lowered graph, the examples, the input sets compared
    after them and the options that decide the verdict, with the report's first lines and its localization."""
    failure = "\n".join(str(report).splitlines()[:40])
    options = {**request.recorded_options(), "name": report.name}  # its report is titled as the failing one was
    recorded = input_sets[2:]
    if request.dynamic_shapes is None and compiled.signature.dynamic:  # an ExportedProgram's Dims, fixed in it
        recorded = [s for s in recorded if _sizes(s) == _sizes(source.example_args)]
        options["not_recorded"] = [
            f"the input sets at sizes other than the example's ({len(input_sets) - 2 - len(recorded)}): the "
            "exported program's Dims are not in the saved graph; verify the program itself to test them"
        ]
    localization = str(report.localization) if report.localization is not None else None
    return write_repro(request.report_dir, compiled.partition.graph_module, tuple(source.example_args), request.settings,
                       request.resolved_backend, failure, name=report.name, input_sets=recorded, options=options,
                       localization=localization)


def _sizes(input_set: Sequence[Any]) -> list[Any]:
    """Each Tensor leaf's shape, None for other leaves: which input sets a static graph can take."""
    return [tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else None for leaf in tree_flatten(tuple(input_set))[0]]
