"""torchvision's detectors, randomly initialised at small sizes: the models torch.export refuses.

Box selection and NMS have data-dependent sizes, so ``torch.export`` refuses every torchvision detector; they are
verified as ``torch.compile(model, backend="tensorrt")`` deploys them (``frontend="auto"``: docs/graph-breaks.md),
each captured graph on the inputs it was called with, and the model whole with its detections matched. Each entry
is its torchvision builder with ``min_size``/``max_size`` set to the image's size (the builders resize to 800
otherwise) and five classes; the backbone is ``make_nontrivial`` (a fresh backbone's activations fall to about
1e-8, where a 5% wrong convolution passes every tolerance).

``detection_fasterrcnn_mobilenet_v3_320`` is in every run of the matrix; the others are opt-in (``registry.OPT_IN``:
a ResNet-50 detector verifies in a minute or more per preset), selected by a pattern naming them
(``--trtcheck-models 'detection_*'``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torchvision.models
from torch import nn

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = ["DETECTION_DEFAULT", "DETECTION_ZOO", "build_detector", "detector_images"]

CALIBRATION_BATCH = 8
"""Images the backbone's batch norms are calibrated on (``make_nontrivial``): at 5 x 5 at the deepest level, two
images left channels with almost no variance, whose normalization amplified rounding a hundredfold."""

# zoo name -> (torchvision builder, image size, builder keywords besides the common ones, opt-in)
_SPECS: dict[str, tuple[str, int, dict[str, Any], bool]] = {
    "detection_fasterrcnn_mobilenet_v3_320": ("fasterrcnn_mobilenet_v3_large_320_fpn", 160, {}, False),
    # a fresh RetinaNet or FCOS scores about its prior, 0.01, below the default 0.05: no box would reach the outputs
    "detection_retinanet": ("retinanet_resnet50_fpn", 128, {"score_thresh": 0.005}, True),
    "detection_fcos": ("fcos_resnet50_fpn", 128, {"score_thresh": 0.005}, True),
    "detection_maskrcnn": ("maskrcnn_resnet50_fpn", 128, {}, True),
    "detection_keypointrcnn": ("keypointrcnn_resnet50_fpn", 128, {"num_classes": 2, "num_keypoints": 5}, True),
    "detection_ssdlite320": ("ssdlite320_mobilenet_v3_large", 320, {}, True),
}


def _keywords_for(builder: str) -> dict[str, Any]:
    """The keywords a zoo entry of ``builder``'s kind passes (``_SPECS``): RetinaNet's and FCOS's score threshold,
    keypoint R-CNN's classes and keypoints, for a torchvision builder the zoo has no entry for (the corpus sweep)."""
    return next((extra for spec, _, extra, _ in _SPECS.values() if builder.split("_")[0] == spec.split("_")[0]), {})


def build_detector(builder: str, size: int, extra: dict[str, Any] | None = None) -> tuple[nn.Module, tuple[Any, ...]]:
    """torchvision's ``builder`` at ``size`` pixels, five classes, its backbone ``make_nontrivial``; ``extra``: the
    builder's own keywords (None: those of the zoo entry of its kind)."""
    extra = _keywords_for(builder) if extra is None else extra
    keywords: dict[str, Any] = {"weights": None, "weights_backbone": None, "num_classes": 5, **extra}
    if not builder.startswith("ssd"):  # SSD resizes to its own fixed size
        keywords.update(min_size=size, max_size=size)
    model = torchvision.models.get_model(builder, **keywords)
    make_nontrivial(model.backbone, (torch.randn(CALIBRATION_BATCH, 3, size, size),))
    return model.eval(), ([torch.rand(3, size, size)],)


def detector_images(size: int) -> list[tuple[Any, ...]]:
    """Two more input sets of images, values in [0, 1] as a detector takes them (its transform normalizes them with
    ImageNet's mean and deviation): ``verify``'s random sets are drawn from a normal distribution, whose values a
    detector never sees, and where its backbone's clamps (Hardsigmoid at 600) decide more than rounding does."""
    generator = torch.Generator().manual_seed(1)
    return [([torch.rand(3, size, size, generator=generator)],) for _ in range(2)]


def _register() -> tuple[str, ...]:
    names = []
    for name, (builder, size, extra, opt_in) in _SPECS.items():
        tags = {"detection"} | ({"detection_heavy"} if opt_in else set())
        register(ZooEntry(name, seeded()(functools.partial(build_detector, builder, size, extra)), tags=frozenset(tags),
                          input_sets=functools.partial(detector_images, size)))
        names.append(name)
    return tuple(names)


DETECTION_ZOO: tuple[str, ...] = _register()
DETECTION_DEFAULT: tuple[str, ...] = tuple(name for name in DETECTION_ZOO if not _SPECS[name][3])
"""The detectors every run of the matrix verifies (the rest are opt-in)."""
