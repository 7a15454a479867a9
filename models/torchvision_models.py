"""torchvision classification models, randomly initialised (``weights=None``: never downloads).

They cover the layer mix real users partition: plain and grouped/depthwise convolutions, batch and
layer norm, squeeze-excitation, channel shuffle, concatenating dense/inception blocks, attention and
shifted windows. Weights are random but seeded, and ``make_nontrivial`` re-draws constant
parameters and calibrates batch-norm statistics so numerical checks exercise every parameter.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
import torchvision.models
from torch import nn

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = ["TORCHVISION_ZOO"]


@dataclass(frozen=True)
class _Spec:
    """How to build one torchvision model for the zoo."""

    name: str
    fallback_module: str
    family: str  # "cnn" or "transformer": lets callers pick one architecture family
    kwargs: dict[str, Any] = field(default_factory=dict)
    input_size: int = 224
    # "heavy": the factory plus one eager forward take over 0.5 s on 2 CPU cores. Measured: vgg11
    # ~0.95 s (133M parameters to initialise), vit_b_16 ~0.65 s (87M; also the largest exported
    # graph, ~1000 nodes); every other entry < 0.45 s. No eager forward alone reaches 1 s.
    heavy: bool = False


_SPECS: tuple[_Spec, ...] = (
    _Spec("resnet18", "layer1.0", "cnn"),
    _Spec("resnet50", "layer2.0", "cnn"),
    _Spec("mobilenet_v2", "features.3", "cnn"),
    _Spec("mobilenet_v3_small", "features.3", "cnn"),
    _Spec("efficientnet_b0", "features.3", "cnn"),
    _Spec("squeezenet1_0", "features.3", "cnn"),
    _Spec("shufflenet_v2_x0_5", "stage2.0", "cnn"),
    _Spec("densenet121", "features.denseblock1.denselayer1", "cnn"),
    _Spec("regnet_y_400mf", "trunk_output.block1.block1-0", "cnn"),
    _Spec("convnext_tiny", "features.1.0", "cnn"),
    _Spec("vit_b_16", "encoder.layers.encoder_layer_0", "transformer", heavy=True),
    _Spec("swin_t", "features.1.0", "transformer"),
    _Spec("googlenet", "inception3a", "cnn", {"aux_logits": False, "init_weights": True}),
    _Spec("inception_v3", "Mixed_5b", "cnn", {"aux_logits": False, "init_weights": True}, input_size=299),
    _Spec("mnasnet0_5", "layers.8.0", "cnn"),
    _Spec("alexnet", "features.3", "cnn"),
    _Spec("vgg11", "features.3", "cnn", heavy=True),
)


def _build(spec: _Spec) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """Random-weight model and a batch-1 image of the size the model was designed for."""
    model = getattr(torchvision.models, spec.name)(weights=None, **spec.kwargs)
    # Calibrate at the real input size: at half size, border effects skew the deeper statistics
    # enough that inception_v3 outputs reach ~300 instead of ~10.
    make_nontrivial(model, (torch.randn(2, 3, spec.input_size, spec.input_size),))
    return model, (torch.randn(1, 3, spec.input_size, spec.input_size),)


def _entry(spec: _Spec) -> ZooEntry:
    tags = {"torchvision", "classification", spec.family} | ({"heavy"} if spec.heavy else set())
    factory = seeded()(functools.partial(_build, spec))
    return ZooEntry(spec.name, factory, tags, fallback_module=spec.fallback_module)


TORCHVISION_ZOO: tuple[str, ...] = tuple(register(_entry(spec)).name for spec in _SPECS)
