"""Convert a partition: every TensorRT segment to one ONNX model, branches of control flow included.

A ``Conversion`` is everything of ``compile`` before engines are built: the lowered graph, its partition,
the ONNX of every segment that converted and the error of every one that did not. It is also what
determinism is checked on: two conversions of one model from scratch must give the same segments and
byte-identical ONNX. A segment's ONNX (``SegmentOnnx``) holds its weights by reference, the lowered graph's
own tensors: converting copies no weight, and each engine copies its weights once when it is built.
Branches of ``torch.cond`` and ``while_loop`` (``Partition.subpartitions``) are
converted the same way, recursively, into ``BranchConversion``s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import torch
import torch.fx

from trtcheck.build.clock import Clock
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.context import with_weights
from trtcheck.conversion.interpreter import held_weights
from trtcheck.errors import ShapeMismatchError
from trtcheck.lowering.export import independent_inputs, keeps, lower
from trtcheck.lowering.graph import copy_graph_module, own_mutable_state
from trtcheck.names import checked_settings, resolve_modules, resolve_ops
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.model import Partition
from trtcheck.partitioning.reasons import Target
from trtcheck.settings import Settings
from trtcheck.shapes import ShapeMismatch, boundary_mismatches, observed
from trtcheck.values import cloned, same_values


@dataclass(eq=False)
class SegmentOnnx:
    """One converted segment's ONNX model, its weights held by reference: ``model`` has every node and
    initializer, each weight (``weights``, by initializer name) as a placeholder whose data is that tensor, the
    lowered graph's own. Converting copies no weight; ``full()`` is the self-contained model (one copy of the
    weights), ``serialized()`` its bytes. The bytes read the weights when they are made: like a
    ``torch.export.ExportedProgram``, a conversion shares the model's parameters (engines copy them when built)."""

    model: onnx.ModelProto
    weights: dict[str, torch.Tensor]

    def full(self) -> onnx.ModelProto:
        return with_weights(self.model, self.weights)

    def serialized(self) -> bytes:
        return self.full().SerializeToString()

    def same_as(self, other: SegmentOnnx | bytes) -> bool:
        """True when this model's serialized bytes are ``other``'s (its bytes, or theirs), compared without
        serializing a weight: the models without their weights byte for byte, then each weight's bytes, where a
        weight that is the same memory as the other's (same data pointer, dtype, shape and strides: the
        conversions read one parameter of one graph) is provably the same bytes, unread. Where the models
        without weights differ, the whole serialized models are compared (they differ but for a model that
        held some weight inline, never seen)."""
        if isinstance(other, SegmentOnnx) and self.weights.keys() == other.weights.keys():
            if self.model.SerializeToString() == other.model.SerializeToString():
                return all(_same_bytes(tensor, other.weights[name]) for name, tensor in self.weights.items())
        return self.serialized() == (other if isinstance(other, bytes) else other.serialized())


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if (a.data_ptr(), a.dtype, a.shape, a.stride()) == (b.data_ptr(), b.dtype, b.shape, b.stride()):
        return True
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_raw(a), _raw(b))


def _raw(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s bytes as a uint8 tensor (no copy): compared bitwise, NaNs and signed zeros included."""
    return tensor.detach().reshape(-1).view(torch.uint8)


class OnnxModels(MutableMapping[int, bytes]):
    """The ONNX model of every converted segment, by segment index: a mapping to serialized bytes, made when
    read (each read serializes the weights again: keep a read only as long as needed). ``segment(index)`` is the
    ``SegmentOnnx`` itself, which compile builds engines from and determinism compares, serializing no weight.
    Bytes may be stored too (a test corrupting a model): they are then what the segment is."""

    def __init__(self, models: Mapping[int, SegmentOnnx | bytes] | None = None) -> None:
        self._models: dict[int, SegmentOnnx | bytes] = dict(models or {})

    def segment(self, index: int) -> SegmentOnnx | bytes:
        return self._models[index]

    def __getitem__(self, index: int) -> bytes:
        model = self._models[index]
        return model if isinstance(model, bytes) else model.serialized()

    def __contains__(self, index: object) -> bool:
        return index in self._models  # Mapping's own would read (serialize) the model

    def __setitem__(self, index: int, model: SegmentOnnx | bytes) -> None:
        self._models[index] = model

    def __delitem__(self, index: int) -> None:
        del self._models[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)

    def __repr__(self) -> str:
        return f"OnnxModels({sorted(self._models)})"

    def differing(self, other: OnnxModels) -> list[int]:
        """The indices whose models differ between this and ``other`` (or exist in one only), in order: the
        serialized bytes compared, without serializing a weight (``SegmentOnnx.same_as``)."""
        return [
            index for index in sorted(self.keys() | other.keys())
            if index not in self or index not in other or not _same(self.segment(index), other.segment(index))
        ]


def _same(a: SegmentOnnx | bytes, b: SegmentOnnx | bytes) -> bool:
    if isinstance(a, SegmentOnnx):
        return a.same_as(b)
    return b.same_as(a) if isinstance(b, SegmentOnnx) else a == b


class Converted:
    """What a converted partition (a model's ``Conversion``, or one branch's) derives from its fields
    ``partition``, ``onnx_models``, ``branches`` and ``layout``."""

    partition: Partition
    onnx_models: OnnxModels
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
    onnx_models: OnnxModels
    errors: dict[int, Exception]
    branches: dict[str, BranchConversion] = field(default_factory=dict)
    layout: list[tuple[str, list[str]]] = field(default_factory=list)  # segments as partitioned, before any fallback


@dataclass
class Conversion(Converted):
    """A model lowered, partitioned and converted: everything of ``compile`` before engines are built.

    ``onnx_models`` holds the ONNX of every TensorRT segment that converted (by segment index: serialized bytes
    when read, ``onnx_models.segment(index)`` the ``SegmentOnnx``, weights by reference); ``errors`` the
    conversion error of every one that did not. Determinism is checked on this: two conversions of one model
    from scratch must give the same segments and byte-identical ONNX (``OnnxModels.differing``).
    """

    graph_module: torch.fx.GraphModule
    partition: Partition
    onnx_models: OnnxModels
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
    model: torch.nn.Module | torch.export.ExportedProgram,
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
    ``lowered`` is ``lower(model, example_inputs)`` made earlier (see ``LoweringCache``): its graph is copied,
    never changed, so one lowering serves every setting a model is compiled with (it carries its own
    dynamic sizes: ``dynamic_shapes`` is then not read). Its ``meta`` keeps shape analysis's run on the example
    inputs (``OBSERVED``), which the next conversion from it on the same inputs reads instead of running again.
    """
    settings = checked_settings(settings)
    clock = clock or Clock()
    args, kwargs = independent_inputs(example_inputs, example_kwargs)
    keep = resolve_ops(settings.torch_executed_ops)
    if lowered is not None and not keeps(lowered, keep):
        lowered = None  # lowered for settings that let a forced op decompose: lower again, keeping it whole
    gm = lowered if lowered is not None else clock.run("lowering", lower, model, args, kwargs, dynamic_shapes=dynamic_shapes, keep=keep)
    owner = model if isinstance(model, torch.nn.Module) else None  # a program: its graph's meta names the modules
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, owner)
    if gm is model or gm is lowered:  # compile never rewrites the caller's own GraphModule, nor its buffers
        gm = copy_graph_module(gm)
    own_mutable_state(gm)
    partition = clock.run("partitioning", partition_graph, gm, settings, support, forced_modules=forced_modules)
    mismatched: dict[int, Exception] = {}
    if check_shapes:
        mismatches = clock.run("shape_analysis", _shape_analysis, partition, flat_inputs(gm, args, kwargs), lowered)
        mismatched = _mismatched_segments(partition, mismatches)
    onnx_models, errors = convert_segments(partition, clock)
    branches = convert_branches(partition, clock)
    return Conversion(gm, partition, onnx_models, errors, args, kwargs, mismatched=mismatched, branches=branches)


OBSERVED = "trtcheck_observed"
"""Key of ``lowered.meta``: the example inputs shape analysis last ran the lowering on, and what it observed."""


def _shape_analysis(partition: Partition, flat: Sequence[Any], lowered: torch.fx.GraphModule | None) -> list[ShapeMismatch]:
    """``find_mismatches`` from the ``Observation`` kept with ``lowered`` where it was made on the same inputs (bit
    for bit, strides included), with ``lowered``'s parameters and buffers as they were then (their identity and
    version: an in-place change bumps it), and on a graph with the same nodes; else from a new run, then kept there:
    a lowering reused under several settings (the matrix's presets) runs the model once for all of them. A run that
    failed is not kept (its error's traceback holds the run's tensors; the next conversion runs again)."""
    versions = _state_versions(lowered) if lowered is not None else None
    kept = lowered.meta.get(OBSERVED) if lowered is not None else None
    reusable = kept[2] if kept is not None and kept[1] == versions and same_values(kept[0], list(flat)) else None
    observation = observed(partition.graph_module, flat, reusable)
    if lowered is not None and observation is not reusable and observation.error is None:
        lowered.meta[OBSERVED] = (cloned(list(flat)), versions, observation)
    return boundary_mismatches(partition, observation)


def _state_versions(gm: torch.fx.GraphModule) -> tuple:
    """Each parameter's and buffer's identity and version counter: what tells that the state a graph computes
    from changed in place since (``load_state_dict``, an optimizer step) without reading a byte of it."""
    return tuple((name, id(tensor), tensor._version) for name, tensor in (*gm.named_parameters(), *gm.named_buffers()))


def convert_segments(partition: Partition, clock: Clock) -> tuple[OnnxModels, dict[int, Exception]]:
    """The ONNX of every TensorRT segment of ``partition`` that converts (``SegmentOnnx``: no weight copied),
    and the error of every one that does not (by segment index): one segment's failure is contained, reported,
    never raised."""
    onnx_models = OnnxModels()
    errors: dict[int, Exception] = {}
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            try:
                accepted = {node.name: partition.reasons[node].converter for node in segment.nodes if node in partition.reasons}
                with held_weights() as weights:
                    model = clock.run("conversion", segment_to_onnx, segment_module(partition.graph_module, segment), accepted=accepted)
                onnx_models[index] = SegmentOnnx(model, weights)
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
