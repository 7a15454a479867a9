"""Detections compared as detections: eager's and the compiled model's boxes matched one to one before their values
are judged, and a detection only one side kept explained when it sits on a cut.

A detector's output (torchvision's: a list with one dict per image of ``boxes`` [N, 4], ``scores`` [N], ``labels``
[N], and ``masks`` or ``keypoints`` per detection) has as many detections as survive its score threshold, NMS and
top-k. A float32 engine moves a score by a few ulps; a score on the threshold (or an IoU on NMS's) then keeps or
drops a detection, and the order of equal scores can change. Compared position by position, that reads as a wrong
engine; compared after matching, the matched detections are judged like any output and each unmatched one is either
on a cut (said as such) or a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

SCORE_MARGIN = 1e-3
"""How close a detection's score (a probability) must be to a cut for a one-sided detection to be explained: far
above the few float32 ulps an engine moves a score by, far below the gap between the scores of distinct detections
of a trained model. An IoU on an NMS threshold gets the same margin."""

MATCH_BOX = 0.05
"""Two detections pair when their labels agree and their boxes differ by at most this share of the box's size (and
their scores by ``MATCH_SCORE``); the values of a pair are then judged like any output, so a loose pairing never
passes a wrong box, and a box moved further is a one-sided detection (a failure unless on a cut)."""
MATCH_SCORE = 0.05


def is_detections(value: Any) -> bool:
    """A dict of per-detection tensors: ``boxes`` [N, 4] and ``scores`` [N]."""
    if not isinstance(value, dict):
        return False
    boxes, scores = value.get("boxes"), value.get("scores")
    return (isinstance(boxes, torch.Tensor) and isinstance(scores, torch.Tensor) and boxes.dim() == 2
            and boxes.shape[-1] == 4 and scores.shape == boxes.shape[:1])


@dataclass(frozen=True)
class Cuts:
    """Where a detector drops detections: its score thresholds and NMS IoU thresholds (``cuts_of``)."""

    scores: tuple[float, ...] = ()
    ious: tuple[float, ...] = ()


def cuts_of(model: torch.nn.Module) -> Cuts:
    """The thresholds torchvision's detectors hold (``score_thresh``, ``box_score_thresh``, ``nms_thresh``, ...), on
    any submodule."""
    scores, ious = set(), set()
    for module in model.modules():
        for name, value in vars(module).items():
            if isinstance(value, float) and name.endswith("score_thresh"):
                scores.add(value)
            elif isinstance(value, float) and name.endswith("nms_thresh"):
                ious.add(value)
    return Cuts(tuple(sorted(scores)), tuple(sorted(ious)))


@dataclass
class OneSided:
    """A detection only one side kept: ``side`` ("eager" or "compiled"), its index there, score, label, and what
    explains it (empty: nothing, a failure)."""

    side: str
    index: int
    score: float
    label: int | None
    explained: str = ""

    def __str__(self) -> str:
        label = f" label {self.label}" if self.label is not None else ""
        why = f": {self.explained}" if self.explained else ": not on any cut (a wrong engine, or a changed model)"
        return f"detection {self.index} kept by {self.side} only (score {self.score:.6g}{label}){why}"


@dataclass
class Matching:
    """Per detection dict (in output order): the one-sided detections; ``explained`` when each is on a cut."""

    one_sided: list[OneSided] = field(default_factory=list)
    matched: int = 0

    @property
    def explained(self) -> bool:
        return all(detection.explained for detection in self.one_sided)

    def lines(self) -> list[str]:
        if not self.one_sided:
            return []
        head = (f"{len(self.one_sided)} detection(s) kept by one side only, each on a cut (a score or IoU on a threshold: "
                "a float32 rounding decides it), not judged; the other " f"{self.matched} matched and judged"
                if self.explained else f"{len(self.one_sided)} detection(s) kept by one side only")
        return [head, *(f"  {detection}" for detection in self.one_sided)]


def _iou(box: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    lt = torch.maximum(box[:2], boxes[:, :2])
    rb = torch.minimum(box[2:], boxes[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(dim=1)
    area = (box[2:] - box[:2]).clamp(min=0).prod()
    areas = (boxes[:, 2:] - boxes[:, :2]).clamp(min=0).prod(dim=1)
    return inter / (area + areas - inter).clamp(min=1e-12)


def _pairs(expected: dict, actual: dict) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Greedy one-to-one pairs, eager's detections by descending score each taking the nearest free compiled one of
    its label within ``MATCH_BOX`` / ``MATCH_SCORE``; then the unpaired indices of each side."""
    e_boxes, a_boxes = expected["boxes"].double(), actual["boxes"].double()
    e_scores, a_scores = expected["scores"].double(), actual["scores"].double()
    e_labels, a_labels = expected.get("labels"), actual.get("labels")
    free = torch.ones(len(a_boxes), dtype=torch.bool)
    pairs = []
    for i in torch.argsort(e_scores, descending=True, stable=True).tolist():
        if not len(a_boxes):
            break
        size = (e_boxes[i, 2:] - e_boxes[i, :2]).abs().max().clamp(min=1.0)
        box_distance = (a_boxes - e_boxes[i]).abs().amax(dim=1) / size
        score_distance = (a_scores - e_scores[i]).abs()
        ok = free & (box_distance <= MATCH_BOX) & (score_distance <= MATCH_SCORE)
        if e_labels is not None and a_labels is not None:
            ok &= a_labels == e_labels[i]
        if ok.any():
            j = int(torch.where(ok, box_distance + score_distance, torch.full_like(box_distance, float("inf"))).argmin())
            free[j] = False
            pairs.append((i, j))
    paired_e = {i for i, _ in pairs}
    return pairs, [i for i in range(len(e_boxes)) if i not in paired_e], [j for j in range(len(a_boxes)) if free[j]]


def _explain(detections: dict, index: int, other: dict, cuts: Cuts) -> str:
    """What puts detection ``index`` on a cut: its score on a score threshold or on the other side's lowest kept score
    (top-k), or its IoU with a box of its label the other side kept on an NMS threshold; "" when nothing does."""
    score = float(detections["scores"][index])
    for cut in cuts.scores:
        if abs(score - cut) <= SCORE_MARGIN:
            return f"its score is within {SCORE_MARGIN:g} of the score threshold {cut:g}"
    if len(other["scores"]) and abs(score - float(other["scores"].min())) <= SCORE_MARGIN:
        return f"its score is within {SCORE_MARGIN:g} of the other side's lowest kept score {float(other['scores'].min()):.6g} (top-k)"
    if len(other["boxes"]) and cuts.ious:
        same = torch.ones(len(other["boxes"]), dtype=torch.bool)
        if "labels" in detections and "labels" in other:
            same = other["labels"] == detections["labels"][index]
        ious = _iou(detections["boxes"][index].double(), other["boxes"].double())[same]
        for cut in cuts.ious:
            if len(ious) and float((ious - cut).abs().min()) <= SCORE_MARGIN:
                return f"its IoU with a box the other side kept is within {SCORE_MARGIN:g} of the NMS threshold {cut:g}"
    return ""


def _per_detection(detections: dict) -> list[str]:
    count = len(detections["boxes"])
    return [key for key, value in detections.items() if isinstance(value, torch.Tensor) and value.dim() and len(value) == count]


def _taken(detections: dict, indices: Sequence[int], keys: Iterable[str]) -> dict:
    index = torch.tensor(list(indices), dtype=torch.long)
    return {key: (detections[key][index] if key in keys else detections[key]) for key in detections}


def _like(sequence: Sequence[Any], items: list[Any]) -> Any:
    """``items`` as the kind of sequence ``sequence`` is (a list, a tuple, a named tuple)."""
    if isinstance(sequence, list):
        return items
    return type(sequence)(*items) if hasattr(sequence, "_fields") else tuple(items)


def matched_outputs(expected: Any, actual: Any, cuts: Cuts) -> tuple[Any, Any, Matching]:
    """``expected`` and ``actual`` with every pair of detection dicts at the same place cut down to their paired
    detections, in eager's order (the rest of the outputs as they are), and the ``Matching`` of what was left out."""
    matching = Matching()

    def walk(e: Any, a: Any) -> tuple[Any, Any]:
        if is_detections(e) and is_detections(a):
            pairs, only_e, only_a = _pairs(e, a)
            matching.matched += len(pairs)
            for side, own, other, indices in (("eager", e, a, only_e), ("compiled", a, e, only_a)):
                labels = own.get("labels")
                for index in indices:
                    label = int(labels[index]) if isinstance(labels, torch.Tensor) else None
                    matching.one_sided.append(OneSided(side, index, float(own["scores"][index]), label,
                                                       _explain(own, index, other, cuts)))
            keys = set(_per_detection(e)) & set(_per_detection(a))
            return _taken(e, [i for i, _ in pairs], keys), _taken(a, [j for _, j in pairs], keys)
        if isinstance(e, (list, tuple)) and isinstance(a, (list, tuple)) and len(e) == len(a):
            walked = [walk(x, y) for x, y in zip(e, a)]
            return _like(e, [x for x, _ in walked]), _like(a, [y for _, y in walked])
        if isinstance(e, dict) and isinstance(a, dict) and e.keys() == a.keys():
            walked = {key: walk(e[key], a[key]) for key in e}
            return {key: pair[0] for key, pair in walked.items()}, {key: pair[1] for key, pair in walked.items()}
        return e, a

    e, a = walk(expected, actual)
    return e, a, matching


def aligned_with_reference(eager: Any, compiled: Any, reference: Any) -> tuple[Any, Any, Any, int]:
    """``eager`` and ``compiled`` (as ``matched_outputs`` left them: pair by pair) and ``reference`` (the model's
    outputs in float64), each detection dict cut down to the detections float64 kept too, in eager's order, so the
    judge compares each detection with its own float64 values; and how many matched detections float64 did not keep
    (each on a cut in float64 itself: a rounding decides whether it exists, so its values are not judged)."""
    dropped = 0

    def walk(e: Any, a: Any, r: Any) -> tuple[Any, Any, Any]:
        nonlocal dropped
        if is_detections(e) and is_detections(a) and is_detections(r):
            pairs, only_e, _ = _pairs(e, r)
            dropped += len(only_e)
            kept = sorted(pairs)
            keys = set(_per_detection(e)) & set(_per_detection(a)) & set(_per_detection(r))
            return (_taken(e, [i for i, _ in kept], keys), _taken(a, [i for i, _ in kept], keys),
                    _taken(r, [k for _, k in kept], keys))
        if all(isinstance(x, (list, tuple)) for x in (e, a, r)) and len(e) == len(a) == len(r):
            walked = [walk(x, y, z) for x, y, z in zip(e, a, r)]
            return tuple(_like(seq, [item[n] for item in walked]) for n, seq in enumerate((e, a, r)))  # type: ignore[return-value]
        if all(isinstance(x, dict) for x in (e, a, r)) and e.keys() == a.keys() == r.keys():
            walked = {key: walk(e[key], a[key], r[key]) for key in e}
            return tuple({key: item[n] for key, item in walked.items()} for n in range(3))  # type: ignore[return-value]
        return e, a, r

    e, a, r = walk(eager, compiled, reference)
    return e, a, r, dropped
