"""Convert a partition: every TensorRT segment to one ONNX model, branches of control flow included.

A ``Conversion`` is everything of ``compile`` before engines are built: the front half's result (``front``:
the lowered graph, its partition and shape analysis), the ONNX of every segment that converted and the error
of every one that did not. It is also what
determinism is checked on: two conversions of one model from scratch must give the same segments and
byte-identical ONNX. A segment's ONNX (``SegmentOnnx``) holds its weights by reference, the lowered graph's
own tensors: converting copies no weight, and each engine copies its weights once when it is built.
Branches of ``torch.cond`` and ``while_loop`` (``Partition.branches``) are
converted the same way, recursively, into ``BranchConversion``s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import torch
import torch.fx

from trtcheck.compiler.clock import Clock
from trtcheck.compiler.front import Front, front
from trtcheck.compiler.request import CompileRequest
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.context import with_weights
from trtcheck.conversion.interpreter import held_weights
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.partition import Partition
from trtcheck.partitioning.reasons import Target
from trtcheck.settings import Settings
from trtcheck.shapes import ShapeAnalysis


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
    ``partition``, ``onnx_models`` and ``branches``."""

    partition: Partition
    onnx_models: OnnxModels
    branches: dict[str, BranchConversion]

    @property
    def layout(self) -> list[tuple[str, list[str]]]:
        """Each segment's target and node names, as partitioned (no later phase changes a partition): what two
        conversions of one model must agree on."""
        return [(s.target.value, [node.name for node in s.nodes]) for s in self.partition.segments]

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


@dataclass
class Conversion(Converted):
    """A model lowered, partitioned, shape-analysed and converted: everything of ``compile`` before engines are built.

    ``onnx_models`` holds the ONNX of every TensorRT segment that converted (by segment index: serialized bytes
    when read, ``onnx_models.segment(index)`` the ``SegmentOnnx``, weights by reference); ``errors`` the
    conversion error of every one that did not. Determinism is checked on this: two conversions of one model
    from scratch must give the same segments and byte-identical ONNX (``OnnxModels.differing``).
    """

    front: Front
    onnx_models: OnnxModels
    errors: dict[int, Exception]
    branches: dict[str, BranchConversion] = field(default_factory=dict)  # torch.cond/while_loop branches (control_flow.py)

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.front.graph_module

    @property
    def partition(self) -> Partition:  # type: ignore[override]
        return self.front.partition

    @property
    def shapes(self) -> ShapeAnalysis:
        return self.front.shapes

    @property
    def example_args(self) -> tuple:
        return self.front.example_args

    @property
    def example_kwargs(self) -> dict:
        return self.front.example_kwargs

    @property
    def mismatched(self) -> dict[int, Exception]:
        """TensorRT segments (by index) that produce or read a value whose shape or dtype, when the segments run
        on the example inputs, is not its metadata's (``ShapeAnalysis.mismatched``): their engines would be built
        from that metadata, so compile runs them in PyTorch. They are converted all the same, so conversions
        compare alike."""
        return self.front.shapes.mismatched


def convert(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any],
    settings: Settings | CompileRequest | None = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> Conversion:
    """The front half (``front``: lower, partition, analyse shapes), then each TensorRT segment to ONNX; no engine.

    The arguments are ``front``'s (a ``CompileRequest``, or ``Settings`` and the request's other fields), which says
    how the model and a reused ``lowered`` are left unchanged.
    """
    clock = clock or Clock()
    head = front(model, example_inputs, settings, example_kwargs=example_kwargs, clock=clock, **options)
    onnx_models, errors = convert_segments(head.partition, clock)
    return Conversion(head, onnx_models, errors, branches=convert_branches(head.partition, clock))


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
                onnx_models[index] = clock.run("conversion", convert_module, segment_module(partition.graph_module, segment), accepted)
            except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
                errors[index] = error
    return onnx_models, errors


def convert_module(module: torch.fx.GraphModule, accepted: Mapping[str, Any] | None = None) -> SegmentOnnx:
    """One standalone graph (``partitioning.extract``'s cut of a segment, or of any set of nodes) to ONNX, its weights
    held by reference: how every segment is converted, and localization's and reduction's sub-engines too, so that
    what they find about a converter is what compile does with it. ``accepted``: the converter partitioning accepted
    for each node, by node name (``segment_to_onnx``). Raises what conversion raises."""
    with held_weights() as weights:
        model = segment_to_onnx(module, accepted=accepted)
    return SegmentOnnx(model, weights)


def convert_branches(partition: Partition, clock: Any) -> dict[str, BranchConversion]:
    """The ONNX of every TensorRT segment of every branch of ``partition``, nested branches included.

    ``clock`` is compile's phase timer (``run(phase, fn, *args)``). A segment that fails to convert is
    recorded, not raised: ``build_branches`` falls it back to PyTorch (or raises under ``strict``).
    """
    return {name: _convert(sub, clock) for name, sub in partition.branches.items()}


def _convert(partition: Partition, clock: Any) -> BranchConversion:

    onnx_models, errors = convert_segments(partition, clock)
    return BranchConversion(partition, onnx_models, errors, convert_branches(partition, clock))
