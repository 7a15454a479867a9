"""Convert a partition: every TensorRT segment to one ONNX model, branches of control flow included.

A ``Conversion`` is everything of ``compile`` before engines are built: the lowered graph, its partition,
the serialized ONNX of every segment that converted and the error of every one that did not. It is also
what determinism is checked on: two conversions of one model from scratch must give the same segments and
byte-identical ONNX. Branches of ``torch.cond`` and ``while_loop`` (``Partition.subpartitions``) are
converted the same way, recursively, into ``BranchConversion``s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.build.clock import Clock
from trtcheck.errors import ShapeMismatchError
from trtcheck.names import checked_settings
from trtcheck.partitioning.model import Partition
from trtcheck.shapes import ShapeMismatch

if TYPE_CHECKING:
    pass
from collections.abc import Sequence

from trtcheck.conversion import segment_to_onnx
from trtcheck.lowering.export import independent_inputs, lower
from trtcheck.lowering.graph import copy_graph_module, own_mutable_state
from trtcheck.names import resolve_modules
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.reasons import Target
from trtcheck.settings import Settings
from trtcheck.shapes import find_mismatches


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


@dataclass
class Conversion(Converted):
    """A model lowered, partitioned and converted: everything of ``compile`` before engines are built.

    ``onnx_models`` holds the serialized ONNX of every TensorRT segment that converted (by segment index);
    ``errors`` the conversion error of every one that did not. Determinism is checked on this: two
    conversions of one model from scratch must give the same segments and byte-identical ONNX.
    """

    graph_module: torch.fx.GraphModule
    partition: Partition
    onnx_models: dict[int, bytes]
    errors: dict[int, Exception]
    example_args: tuple
    example_kwargs: dict
    layout: list[tuple[str, list[str]]] = field(default_factory=list)  # segments as partitioned, before any fallback
    # TensorRT segments (by index) that produce or read a value whose shape or dtype, when the segments run
    # on the example inputs, is not its metadata's: their engines would be built from that metadata, so
    # compile runs them in PyTorch. They are converted all the same, so conversions compare alike.
    mismatched: dict[int, Exception] = field(default_factory=dict)
    branches: dict[str, BranchConversion] = field(default_factory=dict)  # torch.cond/while_loop branches (control_flow.py)


def convert(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    settings: Settings | None = None,
    *,
    support: Support = None,
    example_kwargs: Mapping[str, Any] | None = None,
    check_shapes: bool = True,
    clock: Clock | None = None,
    lowered: torch.fx.GraphModule | None = None,
    dynamic_shapes: Any = None,
) -> Conversion:
    """Lower, partition, analyse shapes and convert each TensorRT segment to ONNX; build no engine.

    The model is never changed: aliased example inputs are copied before export (a graph traced on
    ``(x, x)`` would ignore one input), and buffers the graph writes into get their own copies.
    ``lowered`` is ``lower(model, example_inputs)`` made earlier (see ``LoweringCache``): it is copied,
    never changed, so one lowering serves every setting a model is compiled with (it carries its own
    dynamic sizes: ``dynamic_shapes`` is then not read).
    """
    settings = checked_settings(settings)
    clock = clock or Clock()
    args, kwargs = independent_inputs(example_inputs, example_kwargs)
    gm = lowered if lowered is not None else clock.run("lowering", lower, model, args, kwargs, dynamic_shapes=dynamic_shapes)
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, model)
    if gm is model or gm is lowered:  # compile never rewrites the caller's own GraphModule, nor its buffers
        gm = copy_graph_module(gm)
    own_mutable_state(gm)
    partition = clock.run("partitioning", partition_graph, gm, settings, support, forced_modules=forced_modules)
    mismatched: dict[int, Exception] = {}
    if check_shapes:
        mismatches = clock.run("shape_analysis", find_mismatches, partition, flat_inputs(gm, args, kwargs))
        mismatched = _mismatched_segments(partition, mismatches)
    onnx_models, errors = convert_segments(partition, clock)
    branches = convert_branches(partition, clock)
    return Conversion(gm, partition, onnx_models, errors, args, kwargs, mismatched=mismatched, branches=branches)


def convert_segments(partition: Partition, clock: Clock) -> tuple[dict[int, bytes], dict[int, Exception]]:
    """The serialized ONNX of every TensorRT segment of ``partition`` that converts, and the error of every
    one that does not (by segment index): one segment's failure is contained, reported, never raised."""
    onnx_models: dict[int, bytes] = {}
    errors: dict[int, Exception] = {}
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            try:
                model = clock.run("conversion", segment_to_onnx, segment_module(partition.graph_module, segment))
                onnx_models[index] = model.SerializeToString()
            except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
                errors[index] = error
    return onnx_models, errors


def convert_branches(partition: Partition, clock: Any) -> dict[str, BranchConversion]:
    """The ONNX of every TensorRT segment of every branch of ``partition``, nested branches included.

    ``clock`` is compile's phase timer (``run(phase, fn, *args)``). A segment that fails to convert is
    recorded, not raised: ``compile_branches`` falls it back to PyTorch (or raises under ``strict``).
    """
    return {name: _convert(sub, clock) for name, sub in partition.subpartitions.items()}


def _convert(partition: Partition, clock: Any) -> BranchConversion:

    onnx_models, errors = convert_segments(partition, clock)
    return BranchConversion(partition, onnx_models, errors, convert_branches(partition, clock))


def flat_inputs(gm: torch.fx.GraphModule, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[Any]:
    """The model's inputs flattened the way the lowered graph's placeholders take them."""
    if getattr(gm.graph._codegen, "pytree_info", None) is None:  # placeholders take the arguments as they are
        return list(args)
    leaves, _ = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves


def _mismatched_segments(partition: Partition, mismatches: Sequence[ShapeMismatch]) -> dict[int, Exception]:
    """The TensorRT segments that produce or read a mismatched value, by index, each with the error its
    fallback reports: the value, what the metadata says and what the segments really gave (the first such
    value per segment). A value only Torch segments touch needs nothing: no engine is built from it."""
    found: dict[int, Exception] = {}
    for mismatch in mismatches:
        for index, segment in enumerate(partition.segments):
            produced, read = mismatch.node in segment.nodes, mismatch.node in segment.inputs
            if segment.target is Target.TENSORRT and (produced or read) and index not in found:
                found[index] = ShapeMismatchError(
                    f"{'output' if produced else 'input'} {mismatch.node.name} is {mismatch.got} when the segments "
                    f"run on the example inputs, the graph's metadata says {mismatch.expected}"
                )
    return found
