"""Determinism, of eager and of trtcheck: the precondition of every comparison.

Eager must agree with itself on identical calls (else no comparison with it tests the conversion), and
partitioning and converting the same model again from scratch must give the same segments and
byte-identical ONNX, branches of control flow included (else no failure could be reproduced). Compiling
must also never fix a dynamic size to the example's (``specialization_violations``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.fx

from trtcheck.build.convert import BranchConversion, convert
from trtcheck.errors import NondeterministicModelError
from trtcheck.lowering.symbols import specialized_symbols
from trtcheck.partitioning.model import Partition
from trtcheck.verification.equivalence import compare
from trtcheck.verification.inputs import _run_eager
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
    stitched, model, example_inputs, settings, support, example_kwargs, lowered=None, dynamic_shapes=None
) -> list[Violation]:
    """Partition and convert the model again from scratch (from ``lowered`` when given): the same segments,
    byte-identical ONNX."""
    first = stitched.conversion
    again = convert(
        model, example_inputs, settings, support=support, example_kwargs=example_kwargs, check_shapes=False, lowered=lowered,
        dynamic_shapes=dynamic_shapes,
    )
    if first.layout != again.layout:
        return [Violation("determinism", "partitioning the same model again from scratch gave different segments")]
    return [
        Violation("determinism", f"segment @{index}: converting it again from scratch gave different ONNX bytes")
        for index in sorted(first.onnx_models.keys() | again.onnx_models.keys())
        if first.onnx_models.get(index) != again.onnx_models.get(index)
    ] + branch_determinism_violations(first.branches, again.branches)


def branch_determinism_violations(first: Mapping[str, BranchConversion], again: Mapping[str, BranchConversion]) -> list[Violation]:
    """What differs between two conversions' branches (the same model converted twice from scratch): the
    branches themselves, their segments, or their ONNX bytes; each violation names its branch."""
    if first.keys() != again.keys():
        return [Violation("determinism", f"converting again from scratch gave branches {sorted(again)}, not {sorted(first)}")]
    found = []
    for name, branch in first.items():
        other = again[name]
        if branch.layout != other.layout:
            found.append(Violation("determinism", "partitioning the same branch again from scratch gave different segments", branch=name))
            continue
        found += [
            Violation("determinism", "converting it again from scratch gave different ONNX bytes", index, branch=name)
            for index in sorted(branch.onnx_models.keys() | other.onnx_models.keys())
            if branch.onnx_models.get(index) != other.onnx_models.get(index)
        ]
        found += [violation.inside(name) for violation in branch_determinism_violations(branch.branches, other.branches)]
    return found


def _check_eager_is_deterministic(model, example_inputs, kwargs, state, partition: Partition) -> None:
    """Run eager twice from the same state on the same inputs; raise when it disagrees with itself."""
    first = _run_eager(model, tuple(example_inputs), kwargs, 0, generated=False)
    restore_state(model, state)
    second = _run_eager(model, tuple(example_inputs), kwargs, 0, generated=False)
    restore_state(model, state)
    comparison = compare(first, second, rtol=0.0, atol=0.0)
    if comparison.passed:
        return
    random_ops = sorted({str(node.target) for node in partition.graph_module.graph.nodes if _is_random(node)})
    ops = f"; its random ops: {', '.join(random_ops)}" if random_ops else ""
    raise NondeterministicModelError(
        f"{type(model).__name__} is nondeterministic: two identical eager calls from the same state gave different "
        f"outputs{ops}. No comparison with eager can then test the conversion. Fix: call model.eval() (dropout), "
        f"or remove the random ops (or seed them inside forward) before verifying.\n{comparison}"
    )


def _is_random(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags
