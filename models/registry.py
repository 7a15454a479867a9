"""The model zoo registry: named, deterministic model factories that downstream checks iterate over.

Every entry builds a fresh model with random weights (nothing is ever downloaded) and a fixed seed,
so two builds of the same entry are bit-identical. That is what lets a check compare an eager run
against a partitioned run of a *separately built* copy, and lets a failure be reproduced by name.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "Factory",
    "ZooEntry",
    "get",
    "names",
    "make_nontrivial",
    "register",
    "seeded",
]

# A factory returns the model (in eval mode) and the positional example inputs of its forward.
Factory = Callable[[], tuple[nn.Module, tuple[Any, ...]]]


@dataclass(frozen=True)
class ZooEntry:
    """One named model of the zoo.

    ``tags`` classify entries for selection (``"torchvision"``, ``"fallback"``, ``"heavy"``, ...).
    ``fallback_module`` is a qualified submodule path (``"layer1.0"``) meant for
    ``torch_executed_modules``: running it in PyTorch splits the model in the middle, which is the
    interesting case for module-level fallback. None when the entry has no such submodule.
    ``input_sets`` gives extra valid input sets for a model whose input domain is constrained (a
    positive-definite matrix), where the random sets ``verify`` draws would make eager itself fail.
    ``dynamic_shapes`` is ``torch.export.export``'s argument for the example inputs (``torch.export.Dim`` per
    dynamic size): the entry is compiled with it, and verified at the minimum, maximum and random sizes in range.
    ``fp32_nodes`` maps a reduced precision (``"fp16"``, ``"bf16"``) to the nodes the entry needs in float32 there
    (``Settings.fp32_nodes``, as ``trtcheck precision`` found them), and ``precision_notes`` says why: the matrix
    at that precision (``--trtcheck-precision``) runs with them, and docs/precision.md lists them.
    """

    name: str
    factory: Factory
    tags: frozenset[str] = field(default_factory=frozenset)
    fallback_module: str | None = None
    input_sets: Callable[[], list[tuple[Any, ...]]] | None = None  # valid inputs, where random ones are not
    dynamic_shapes: Any = None  # torch.export's dynamic_shapes for the example inputs (torch.export.Dim values)
    fp32_nodes: Mapping[str, Sequence[str]] = field(default_factory=dict)  # precision -> nodes kept in float32
    precision_notes: str = ""  # why ``fp32_nodes``

    def __post_init__(self) -> None:
        # Accept any iterable of tags (a tuple reads best at call sites) but store a frozenset, so
        # entries stay hashable and tag tests are order-free.
        if isinstance(self.tags, str):
            raise TypeError(f"ZooEntry {self.name!r}: tags must be an iterable of strings, not one string")
        object.__setattr__(self, "tags", frozenset(self.tags))

    def build(self) -> tuple[nn.Module, tuple[Any, ...]]:
        """Call the factory: a fresh eval-mode model and its example inputs."""
        return self.factory()


_ZOO: dict[str, ZooEntry] = {}


def register(entry: ZooEntry, *, override: bool = False) -> ZooEntry:
    """Add ``entry`` to the zoo; re-using a name is an error unless ``override=True``."""
    if entry.name in _ZOO and not override:
        raise ValueError(f"zoo entry {entry.name!r} is already registered; pass override=True to replace it")
    _ZOO[entry.name] = entry
    return entry


def get(name: str) -> ZooEntry:
    """The entry called ``name``; a ``KeyError`` suggesting close names when there is none."""
    try:
        return _ZOO[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_ZOO), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else "; see models.names()"
        raise KeyError(f"no zoo entry named {name!r}{hint}") from None


OPT_IN: frozenset[str] = frozenset({"quantized", "detection_heavy"})
"""Tags of entries that "every model" (no pattern, or ``"*"``) leaves out: slow to verify, they are selected by a
pattern or a tag that names them (``"quantized_*"``, ``"detection_*"``, ``tags=["quantized"]``)."""


def names(pattern: str | None = None, *, tags: Iterable[str] = (), exclude_tags: Iterable[str] = ()) -> list[str]:
    """Registered names in registration order, filtered by a glob and by tags.

    ``pattern`` is an ``fnmatch`` glob (``"resnet*"``, ``"*net*"``); a plain name matches only itself.
    An entry is kept when it has every tag in ``tags`` and none in ``exclude_tags``; entries tagged ``OPT_IN`` only
    when the pattern is not "every model" or ``tags`` names their tag.
    """
    required, excluded = frozenset(tags), frozenset(exclude_tags)
    if pattern in (None, "*"):
        excluded |= OPT_IN - required
    return [
        name
        for name, entry in _ZOO.items()
        if (pattern is None or fnmatch.fnmatchcase(name, pattern))
        and required <= entry.tags
        and not excluded & entry.tags
    ]


def seeded(seed: int = 0) -> Callable[[Factory], Factory]:
    """Decorator making a factory deterministic without disturbing the caller's RNG state.

    The factory body runs under ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng``, so both
    the weights and the example inputs are fixed, and building a zoo model in the middle of a test
    does not change what that test's own random calls produce.
    """

    def decorator(factory: Factory) -> Factory:
        @functools.wraps(factory)
        def wrapper() -> tuple[nn.Module, tuple[Any, ...]]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model, example_inputs = factory()
            return model.eval(), tuple(example_inputs)

        return wrapper

    return decorator


_NORM_TYPES = (nn.modules.batchnorm._BatchNorm,)


@torch.no_grad()
def make_nontrivial(model: nn.Module, calibration_inputs: tuple[Any, ...]) -> nn.Module:
    """Re-draw the parts of a fresh random model that would hide conversion bugs.

    * Parameters initialised to one tiny constant (zero biases, ViT's zero head, ConvNeXt's 1e-6
      layer scale) make whatever feeds them invisible in the output: a converter that dropped a
      bias, or a whole residual branch, would still pass. They get small random values instead.
    * Fresh batch norms (mean 0, var 1, weight 1, bias 0) are almost the identity in eval mode, yet
      leave activations unnormalised, so deep nets blow up (inception_v3 reaches 1e12). Their
      affine parameters are randomised and their running statistics measured on
      ``calibration_inputs`` in one train-mode forward, so activations stay O(1) and every
      statistic matters. ``calibration_inputs`` needs more than one value per channel at every
      batch norm (use batch size 2 for classifiers).

    Uses the global RNG: call it inside a ``seeded`` factory. Returns ``model`` in eval mode.
    """
    for param in model.parameters():
        flat = param.detach().reshape(-1)
        if flat.numel() and flat[0].abs() < 1e-3 and bool((flat == flat[0]).all()):
            param.uniform_(-0.1, 0.1)
    norms = [m for m in model.modules() if isinstance(m, _NORM_TYPES) and m.track_running_stats]
    if norms:
        momenta = [m.momentum for m in norms]
        for module in norms:
            if module.affine:
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
            module.reset_running_stats()
            module.momentum = None  # cumulative average: the stats are exactly this batch's
        model.train()
        model(*calibration_inputs)
        for module, momentum in zip(norms, momenta):
            module.momentum = momentum
    return model.eval()
