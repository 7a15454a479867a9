"""Detections compared as detections (``verification.detections``): matched one to one, a detection one side alone
kept explained only when it sits on a cut, and a moved box never passed."""

from __future__ import annotations

import torch

from trtcheck.verification.detections import Cuts, cuts_of, is_detections, matched_outputs
from trtcheck.verification.judge import Judge


def _detections(boxes, scores, labels) -> dict:
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "scores": torch.tensor(scores), "labels": torch.tensor(labels)}


EAGER = _detections([[0, 0, 10, 10], [20, 20, 40, 40], [5, 5, 8, 9]], [0.9, 0.7, 0.0505], [1, 2, 1])
CUTS = Cuts(scores=(0.05,), ious=(0.5,))


def test_the_same_detections_in_another_order_match_and_pass():
    compiled = {key: value[[2, 0, 1]] for key, value in EAGER.items()}
    eager, actual, matching = matched_outputs([EAGER], [compiled], CUTS)
    assert matching.matched == 3 and not matching.one_sided
    assert Judge().compare(eager, actual).passed


def test_a_detection_dropped_on_the_score_threshold_is_explained():
    compiled = {key: value[:2] for key, value in EAGER.items()}  # 0.0505 fell below 0.05 in the engine
    eager, actual, matching = matched_outputs([EAGER], [compiled], CUTS)
    assert matching.matched == 2 and len(matching.one_sided) == 1 and matching.explained
    assert "score threshold 0.05" in "\n".join(matching.lines())
    assert Judge().compare(eager, actual).passed


def test_a_detection_dropped_far_from_any_cut_fails():
    compiled = {key: value[[0, 2]] for key, value in EAGER.items()}  # the 0.7 box is gone
    _, _, matching = matched_outputs([EAGER], [compiled], CUTS)
    assert not matching.explained
    assert "not on any cut" in "\n".join(matching.lines())


def test_a_box_moved_a_little_is_matched_then_fails_the_judge():
    compiled = {key: value.clone() for key, value in EAGER.items()}
    compiled["boxes"][1] += 0.5  # within the pairing's 5%, far outside the tolerances
    eager, actual, matching = matched_outputs([EAGER], [compiled], CUTS)
    assert matching.matched == 3
    assert not Judge().compare(eager, actual).passed


def test_a_box_moved_far_is_one_sided_on_both_sides_and_fails():
    compiled = {key: value.clone() for key, value in EAGER.items()}
    compiled["boxes"][1] += 10.0
    _, _, matching = matched_outputs([EAGER], [compiled], CUTS)
    assert [d.side for d in matching.one_sided] == ["eager", "compiled"] and not matching.explained


def test_a_torchvision_detectors_cuts_are_read_from_it():
    import torchvision

    model = torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3)
    cuts = cuts_of(model)
    assert model.score_thresh in cuts.scores and model.nms_thresh in cuts.ious
    assert is_detections(EAGER) and not is_detections({"boxes": torch.zeros(2, 4)})
