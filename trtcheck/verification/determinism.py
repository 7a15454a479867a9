"""Determinism, of eager and of trtcheck: the precondition of every comparison.

Eager must agree with itself on identical calls (else no comparison with it tests the conversion), and
partitioning and converting the same model again from scratch must give the same segments and
byte-identical ONNX, branches of control flow included (else no failure could be reproduced). Compiling
must also never fix a dynamic size to the example's (``specialization_violations``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.convert import Converted, convert
from trtcheck.compiler.request import CompileRequest
from trtcheck.errors import NondeterministicModelError
from trtcheck.lowering.symbols import specialized_symbols
from trtcheck.partitioning.partition import Partition
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.inputs import cloned, run_eager
from trtcheck.verification.invariants import Violation
from trtcheck.verification.state import restore_state


def specialization_violations(gm: torch.fx.GraphModule) -> list[Violation]:
    """A ``dynamic_shape`` violation for every dynamic size of ``gm`` that compiling fixed to a number."""
    return [
        Violation(
            "dynamic_shape",
            f"compiling fixed the dynamic size {symbol} to {value}, the example's: a comparison on a symbolic size "
            "inside trtcheck (a bug); engines and checks after it treat that size as static",
        )
        for symbol, value in specialized_symbols(gm).items()
    ]


def determinism_violations(
    stitched, model, example_inputs, example_kwargs, request: CompileRequest,
) -> list[Violation]:
    """Partition and convert the model again from scratch, as ``request`` compiled it (from its ``lowered`` when
    given): the same segments, byte-identical ONNX, in the model and in every branch."""
    again = convert(model, example_inputs, request, example_kwargs=example_kwargs, check_shapes=False)
    return conversion_differences(stitched.conversion, again)


def conversion_differences(first: Converted, again: Converted) -> list[Violation]:
    """What differs between two conversions of one partition (a model's, or one branch's) from scratch: its
    segments, or the ONNX bytes of a segment; then the same for each branch, recursively, each violation
    naming its branch."""
    if first.layout != again.layout:
        return [Violation("determinism", "partitioning the same model again from scratch gave different segments")]
    return [
        Violation("determinism", "converting it again from scratch gave different ONNX bytes", index)
        for index in first.onnx_models.differing(again.onnx_models)
    ] + branch_determinism_violations(first.branches, again.branches)


def branch_determinism_violations(first: Mapping[str, Converted], again: Mapping[str, Converted]) -> list[Violation]:
    """What differs between two conversions' branches (the same model converted twice from scratch): the
    branches themselves, or ``conversion_differences`` of each, named by its branch."""
    if first.keys() != again.keys():
        return [Violation("determinism", f"converting again from scratch gave branches {sorted(again)}, not {sorted(first)}")]
    return [violation.inside(name) for name, branch in first.items() for violation in conversion_differences(branch, again[name])]


def check_eager_is_deterministic(model, example_inputs, kwargs, state, partition: Partition, cache: EagerCache | None = None) -> Any:
    """Run eager twice from the same state on the same inputs; raise when it disagrees with itself. Returns the
    (bitwise agreed) outputs under no_grad, which verify reuses wherever eager would compute them again.

    ``cache`` (bound to ``model`` in ``state``): outputs it holds for the examples were agreed on by an earlier
    call of this check from the same state; eager runs once more and must give them again bit for bit, which
    proves it still computes what the cache says (a plain attribute changed, a global flag, train mode), and then
    every output the cache holds is trusted. Otherwise the cache is emptied and the check runs in full. Agreed
    outputs are put in it."""
    first = run_eager(model, tuple(example_inputs), kwargs, 0, generated=False)
    restore_state(model, state)
    if cache is not None:
        known, outputs = cache.get(tuple(example_inputs), kwargs, grad=False)
        if known and compare_outputs(outputs, first, rtol=0.0, atol=0.0).passed:
            return first
        cache.clear()
    second = run_eager(model, tuple(example_inputs), kwargs, 0, generated=False)
    restore_state(model, state)
    comparison = compare_outputs(first, second, rtol=0.0, atol=0.0)
    if comparison.passed:
        if cache is not None:
            cache.put(tuple(example_inputs), kwargs, False, first, model)
        return first
    random_ops = sorted({str(node.target) for node in partition.graph_module.graph.nodes if _is_random(node)})
    ops = f"; its random ops: {', '.join(random_ops)}" if random_ops else ""
    raise NondeterministicModelError(
        f"{type(model).__name__} is nondeterministic: two identical eager calls from the same state gave different "
        f"outputs{ops}. No comparison with eager can then test the conversion. Fix: call model.eval() (dropout), "
        f"or draw the random values outside the model and pass them in as inputs, before verifying.\n{comparison}"
    )


def check_compiled_is_deterministic(stitched: Any, model: torch.nn.Module, example_inputs: Sequence[Any], kwargs: dict) -> None:
    """A model whose random ops eager seeds inside ``forward`` (``torch.manual_seed`` before ``randn``) is
    deterministic in eager, but torch.export drops its manual_seed call: the compiled module draws new numbers on every
    call. Two calls that disagree raise ``NondeterministicModelError`` naming the random ops, instead of an
    unexplained "outputs differ"."""
    random_ops = sorted({str(node.target) for node in stitched.conversion.graph_module.graph.nodes if _is_random(node)})
    if not random_ops:
        return
    with torch.no_grad():
        first = stitched(*cloned(tuple(example_inputs)), **cloned(kwargs))
        second = stitched(*cloned(tuple(example_inputs)), **cloned(kwargs))
    comparison = compare_outputs(first, second, rtol=0.0, atol=0.0)
    if comparison.passed:
        return
    raise NondeterministicModelError(
        f"the compiled {type(model).__name__} is nondeterministic: two identical calls gave different outputs, while "
        f"eager agrees with itself. Its random ops ({', '.join(random_ops)}) are seeded inside forward, and torch.export "
        "does not keep torch.manual_seed or a generator's state in the graph, so every compiled call draws new "
        "numbers. Fix: draw the random values outside the model and pass them in as inputs (or remove the random "
        "ops: model.eval() for dropout)"
    )


def _is_random(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags
