"""Compiling control flow: engines inside the branches of ``torch.cond`` and ``while_loop``.

Partitioning (``trtcheck.partitioning.control_flow``) leaves each control-flow node in a Torch segment of
its own and partitions each branch into ``Partition.subpartitions``. Compiling follows the same tree:

* ``convert_branches`` (called by ``convert``) turns every branch's TensorRT segments into ONNX, so a
  ``Conversion`` holds the whole model and determinism checks compare branches too;
* ``compile_branches`` (called by ``compile`` after stitching the parent) builds each branch's engines,
  stitches the branch like any partition, and puts the stitched branch in place of the original attribute
  of the stitched parent. The parent's Torch segment copied the control-flow node and its ``get_attr`` of
  the branch as they were, so it now calls the stitched branch: the op's eager implementation calls its
  branches as plain callables (``true_fn(*operands)``), which a stitched ``GraphModule`` is.

The lowered graph and its branch modules are never changed (a branch is swapped in the stitched module
only), so a failure report or repro still sees the model as lowered.

Shape analysis does not run inside branches: a cond takes one branch per call, so the example inputs
cannot confirm both, and a branch's operands exist only inside the parent's run. Branch engines are built
from the graph's metadata like every engine. A branch segment that fails to convert or build falls back to
PyTorch: its sub-partition's ``fallbacks`` records it, and the parent's ``fallbacks`` repeats it prefixed
with the branch name, so ``verify(allow_fallbacks=False)`` fails on it as on any fallback.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.lowering import symbol_ranges
from trtcheck.partitioning.control_flow import branch_names, is_control_flow
from trtcheck.partitioning.partition import Partition
from trtcheck.stitching import EngineModule, stitch

if TYPE_CHECKING:
    from trtcheck.compiler import Conversion
    from trtcheck.verification.invariants import Violation


class Converted:
    """What a converted partition (a model's ``Conversion``, or one branch's) derives from its fields
    ``partition``, ``onnx_models``, ``branches`` and ``layout``."""

    partition: Partition
    onnx_models: dict[int, bytes]
    branches: dict[str, BranchConversion]
    layout: list[tuple[str, list[str]]]

    def __post_init__(self) -> None:
        if not self.layout:  # the segments as partitioned, before any fallback
            self.layout = [(s.target.value, [node.name for node in s.nodes]) for s in self.partition.segments]

    @property
    def engine_count(self) -> int:
        """ONNX models here and in every nested branch: the engines the compiled model may run."""
        return len(self.onnx_models) + sum(branch.engine_count for branch in self.branches.values())


@dataclass
class BranchConversion(Converted):
    """One branch's share of a ``Conversion``: its partition, the ONNX of each TensorRT segment that
    converted (by segment index), the error of each that did not, and its own branches."""

    partition: Partition
    onnx_models: dict[int, bytes]
    errors: dict[int, Exception]
    branches: dict[str, BranchConversion] = field(default_factory=dict)
    layout: list[tuple[str, list[str]]] = field(default_factory=list)  # segments as partitioned, before any fallback



def convert_branches(partition: Partition, clock: Any) -> dict[str, BranchConversion]:
    """The ONNX of every TensorRT segment of every branch of ``partition``, nested branches included.

    ``clock`` is compile's phase timer (``run(phase, fn, *args)``). A segment that fails to convert is
    recorded, not raised: ``compile_branches`` falls it back to PyTorch (or raises under ``strict``).
    """
    return {name: _convert(sub, clock) for name, sub in partition.subpartitions.items()}


def _convert(partition: Partition, clock: Any) -> BranchConversion:
    from trtcheck.compiler import convert_segments  # it imports this module

    onnx_models, errors = convert_segments(partition, clock)
    return BranchConversion(partition, onnx_models, errors, convert_branches(partition, clock))


def compile_branches(conversion: Conversion, stitched: torch.fx.GraphModule, backend: str, *, strict: bool, clock: Any) -> None:
    """Build the engines of every branch of ``conversion``, stitch each branch and swap it into ``stitched``
    (the stitched parent, in place), nested branches first into their own stitched parents.

    Fallbacks go to the branch's sub-partition and, prefixed ``branch NAME:``, to its parent's.
    """
    ranges = symbol_ranges(conversion.graph_module)  # one export: branches share the parent's symbols
    _compile(conversion.partition, conversion.branches, stitched, backend, strict, clock, ranges, conversion.engine_count, "")


def _compile(
    parent: Partition,
    branches: Mapping[str, BranchConversion],
    stitched_parent: torch.fx.GraphModule,
    backend: str,
    strict: bool,
    clock: Any,
    ranges: Mapping[str, Any],
    engines_in_model: int,
    path: str,
) -> None:
    from trtcheck.compiler import build_engines  # it imports this module

    for name, branch in branches.items():
        where = f"{path}/{name}" if path else name
        engines = build_engines(
            branch.partition, branch.onnx_models, branch.errors, backend, clock, ranges,
            strict=strict, engines_in_model=engines_in_model, where=where,
        )
        module = clock.run("stitching", stitch, branch.partition, engines)
        _compile(branch.partition, branch.branches, module, backend, strict, clock, ranges, engines_in_model, where)
        owner, _, attribute = name.rpartition(".")
        setattr(stitched_parent.get_submodule(owner), attribute, module)
        parent.fallbacks += [f"branch {name}: {line}" for line in branch.partition.fallbacks]
    _call_without_autograd(stitched_parent)


def _call_without_autograd(stitched: torch.fx.GraphModule) -> None:
    """Make every control-flow node of ``stitched`` whose branches run engines call its op with autograd off.

    With grad enabled and any operand requiring grad (the parameters a cond passes in always do), a
    control-flow op's autograd kernel first traces both branches with fake tensors to check them for
    mutation (``HigherOrderOperator.gen_schema``), and no engine can run on fake tensors. Engines carry no
    gradient anyway, so the op runs as it does under ``torch.no_grad()``: its eager kernel, calling the
    branch that the predicate picks. Nodes whose branches hold no engine keep autograd.
    """
    changed = False
    for node in stitched.graph.nodes:
        if is_control_flow(node) and any(_runs_engines(getattr(stitched, name)) for name in branch_names(node)):
            node.target = _without_autograd(node.target)
            changed = True
    if changed:
        stitched.recompile()


def _runs_engines(module: torch.nn.Module) -> bool:
    return any(isinstance(child, EngineModule) for child in module.modules())


class WithoutAutograd:
    """``op`` called under ``torch.no_grad()``: the target of a stitched control-flow node (see ``_call_without_autograd``)."""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.__name__ = f"{getattr(op, '__name__', 'control_flow')}_without_autograd"  # what the stitched code shows

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"WithoutAutograd({self.op!r})"


@functools.cache
def _without_autograd(op: Any) -> WithoutAutograd:
    return WithoutAutograd(op)


def stitched_branches(stitched: torch.fx.GraphModule) -> list[tuple[str, torch.fx.GraphModule]]:
    """The stitched branch modules ``compile_branches`` put into ``stitched`` (its own, not nested ones), by name."""
    return [(name, child) for name, child in stitched.named_children() if isinstance(child, torch.fx.GraphModule)]


def branch_determinism_violations(first: Mapping[str, BranchConversion], again: Mapping[str, BranchConversion]) -> list[Violation]:
    """What differs between two conversions' branches (the same model converted twice from scratch): the
    branches themselves, their segments, or their ONNX bytes; each violation names its branch."""
    from trtcheck.verification.invariants import Violation  # verification imports the compiler, which imports this

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
