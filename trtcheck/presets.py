"""Named fallback presets: the settings the verification matrix crosses every model with.

A preset may depend on the model (forcing "a submodule of each zoo model" needs that model's submodule
path), so each is a function from the model's ``fallback_module`` (or None) to ``Settings``, or to None
when it does not apply to that model.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trtcheck.errors import SettingsError
from trtcheck.settings import Settings


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    build: Callable[[str | None], Settings | None]

    def settings_for(self, fallback_module: str | None = None) -> Settings | None:
        """The preset's settings for a model with this ``fallback_module``; None when it does not apply."""
        return self.build(fallback_module)


def _fixed(**values) -> Callable[[str | None], Settings]:
    return lambda fallback_module: Settings(**values)


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset("min_block_size_1", "every convertible node in TensorRT", _fixed(min_block_size=1)),
        Preset("min_block_size_3", "TensorRT segments of 3 nodes or more", _fixed(min_block_size=3)),
        Preset("min_block_size_5", "the defaults (min_block_size 5, dependency-aware)", _fixed(min_block_size=5)),
        Preset("torch_relu", "aten::relu forced to PyTorch", _fixed(min_block_size=1, torch_executed_ops=["aten::relu"])),
        Preset("torch_add", "aten::add forced to PyTorch", _fixed(min_block_size=1, torch_executed_ops=["aten::add"])),
        Preset(
            "torch_module",
            "the model's fallback submodule forced to PyTorch",
            lambda module: Settings(min_block_size=1, torch_executed_modules=[module]) if module else None,
        ),
        Preset("naive", "naive (greedy) segmentation", _fixed(min_block_size=1, segmentation="naive")),
        Preset("optimal", "optimal segmentation (the fewest segments any order allows)", _fixed(min_block_size=2, segmentation="optimal")),
        Preset("full_compilation", "require_full_compilation: one engine or a clear error", _fixed(require_full_compilation=True)),
    )
}

DEFAULT_PRESETS = ("min_block_size_1", "min_block_size_5", "torch_relu", "torch_module")


def resolve_presets(names: Iterable[str]) -> list[Preset]:
    """Presets by name (``"all"`` selects every preset); an unknown name is an error listing the known ones."""
    selected: list[Preset] = []
    for name in names:
        if name == "all":
            selected.extend(p for p in PRESETS.values() if p not in selected)
            continue
        if name not in PRESETS:
            close = difflib.get_close_matches(name, list(PRESETS), n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise SettingsError(f"unknown trtcheck preset {name!r}.{hint} Known presets: {', '.join(PRESETS)}, all")
        if PRESETS[name] not in selected:
            selected.append(PRESETS[name])
    return selected
