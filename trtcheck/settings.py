"""``Settings``: the user's fallback knobs, and the resolution of the op and module names they contain.

Names are resolved once, up front, so that a typo is an error that suggests the nearest real names
instead of a setting that silently matches nothing.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from trtcheck.errors import SettingsError, UnknownSettingError

SEGMENTATIONS = ("naive", "dependency_aware", "optimal")


@dataclass(frozen=True)
class Autocast:
    """Torch-TensorRT's rule-based Autocast (``torch_tensorrt.compile(enable_autocast=True, ...)``, its
    ``nodeclassifier``) as a policy that keeps more nodes in float32 under ``precision="fp16"``/``"bf16"``, so that
    trtcheck verifies the engine a Torch-TensorRT user of those settings deploys. A node stays in float32 when any rule
    holds (the engine applies them to the segment's ONNX nodes by the fx node each came from:
    ``trtcheck.compiler.mixed_precision``):

    - ``excluded_nodes``: regular expressions ``re.match``-ed against the lowered graph's node name (Torch-TensorRT
      matches the innermost module path of the node's ``nn_module_stack``, which trtcheck's ONNX does not record);
    - ``excluded_ops``: ATen op names (``"aten.flatten.using_ints"``, ``"aten::softmax"``, or Torch-TensorRT's
      ``"torch.ops.aten.flatten.using_ints"``), as ``Settings.fp32_nodes`` matches ops;
    - ``max_output_threshold`` (Torch-TensorRT's default 512): the node reads or produces a value whose largest
      magnitude in ``calibration`` exceeds it. ``calibration`` maps node names of the lowered graph to the largest
      ``|value|`` each produced on calibration data (Torch-TensorRT's ``autocast_calibration_dataloader``); without
      it, as in Torch-TensorRT without a data loader, this rule keeps nothing;
    - ``max_depth_of_reduction`` (default None: off): a convolution (``in_channels / groups`` times the kernel's
      volume), matmul, mm, bmm, dot or mv (the reduced dimension) or scaled-dot-product attention (the hidden size)
      reducing over more elements than this. Like Torch-TensorRT, ``aten.addmm`` (``nn.Linear``) is not counted.
    """

    excluded_nodes: tuple[str, ...] = ()
    excluded_ops: tuple[str, ...] = ()
    max_output_threshold: float | None = 512.0
    max_depth_of_reduction: int | None = None
    calibration: Mapping[str, float] | None = None

    @classmethod
    def of(cls, value: Any) -> Autocast | None:
        """``Settings.autocast`` as a policy: None, a named policy (``AUTOCAST_POLICIES``), an ``Autocast``, or the
        mapping of its fields that ``dataclasses.asdict`` gives (a repro's ``settings.json`` reads back)."""
        if value is None or isinstance(value, Autocast):
            return value
        if isinstance(value, str) and value in AUTOCAST_POLICIES:
            return AUTOCAST_POLICIES[value]
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(str(key) for key in value if key not in known)
            if unknown:
                raise SettingsError(f"autocast has no field(s) {', '.join(map(repr, unknown))}; its fields are {', '.join(sorted(known))}")
            values = dict(value)
            for name in ("excluded_nodes", "excluded_ops"):
                if isinstance(values.get(name), (list, tuple, set, frozenset)):
                    values[name] = tuple(values[name])
            return cls(**values)
        names = ", ".join(map(repr, AUTOCAST_POLICIES))
        raise SettingsError(
            f"autocast must be None, a policy name ({names}) or a trtcheck.settings.Autocast(...), got {value!r} ({type(value).__name__})"
        )

    def validate(self) -> None:
        """Raise ``SettingsError`` for a field that cannot mean what was intended (regexes compile, numbers are numbers)."""
        for name in ("excluded_nodes", "excluded_ops"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
                raise SettingsError(f"Autocast.{name} must be a list of strings, got {value!r}: write [{value!r}]"
                                    if isinstance(value, str) else f"Autocast.{name} must be a list of strings, got {value!r}")
            for entry in value:
                if not isinstance(entry, str) or not entry:
                    raise SettingsError(f"Autocast.{name} entries must be non-empty strings, got {entry!r}")
        for pattern in self.excluded_nodes:
            try:
                re.compile(pattern)
            except re.error as error:
                raise SettingsError(f"Autocast.excluded_nodes: {pattern!r} is not a regular expression ({error})") from None
        threshold = self.max_output_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0):
            raise SettingsError(f"Autocast.max_output_threshold must be a number > 0 or None, got {threshold!r}")
        depth = self.max_depth_of_reduction
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise SettingsError(f"Autocast.max_depth_of_reduction must be an int >= 0 or None (off), got {depth!r}")
        if self.calibration is not None:
            if not isinstance(self.calibration, Mapping):
                raise SettingsError(f"Autocast.calibration must map node names to their largest |value|, got {self.calibration!r}")
            for key, magnitude in self.calibration.items():
                bad = isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)) or math.isnan(magnitude)
                if not isinstance(key, str) or bad:
                    raise SettingsError(f"Autocast.calibration entries must be node name -> largest |value|, got {key!r}: {magnitude!r}")


AUTOCAST_POLICIES: dict[str, Autocast] = {"torch_tensorrt": Autocast()}
"""Named ``Settings.autocast`` policies: ``"torch_tensorrt"`` is Torch-TensorRT's ``enable_autocast`` with its defaults
(no exclusions, output threshold 512 on calibration data, no reduction-depth limit)."""


@dataclass
class Settings:
    """How a model is split between TensorRT and PyTorch (the "automatic fallback" knobs of Torch-TensorRT's partitioning design).

    Attributes:
        min_block_size: the fewest compute nodes (``operator.getitem`` not counted) a TensorRT segment may
            have; smaller runs fall back to PyTorch, since an engine call costs more than it saves.
        torch_executed_ops: ops forced to PyTorch. Accepts ``"aten::add"``, ``"aten.add"``,
            ``"aten.add.Tensor"``, ``torch.ops.aten.add`` and ``torch.ops.aten.add.Tensor``; a name
            without an overload matches every overload.
        torch_executed_modules: submodules forced to PyTorch, by class name (``"BasicBlock"`` or its
            qualified ``"torchvision.models.resnet.BasicBlock"``) or by qualified path (``"layer1.0"``).
        segmentation: ``"dependency_aware"`` (default, fewer segments), ``"naive"`` (one linear pass) or
            ``"optimal"`` (the fewest segments the graph's dependencies allow, then the fewest bytes crossing
            boundaries; never more segments than ``"dependency_aware"``: ``trtcheck.partitioning.optimal``).
        require_full_compilation: demand exactly one TensorRT segment, or fail naming what prevents it.
        precision: what engines compute in: ``"fp32"`` (default: every tensor keeps the ONNX model's dtype),
            ``"fp16"`` or ``"bf16"``: each segment's ONNX model in that type, its inputs and outputs in their own
            dtypes, ``fp32_nodes``, ``autocast`` and ops without such a kernel in float32; ``verify`` judges outputs
            against eager's own error at that precision (docs/precision.md).
        fp32_nodes: under ``precision="fp16"``/``"bf16"``, the nodes kept in float32 (the layers whose range or
            accumulation the reduced precision breaks: a LayerNorm's variance, a masked softmax), by the lowered
            graph's node name (``"native_layer_norm"``, as ``Partition.explain`` lists them) or by op name
            (``"aten::native_layer_norm"``: every node calling it). ``trtcheck precision MODEL --precision fp16``
            searches for such a set.
        use_fp32_acc: under ``precision="fp16"``/``"bf16"``, every MatMul and Gemm reads its inputs in the reduced
            precision, multiplies and accumulates in float32 and casts its result back (Torch-TensorRT's
            ``use_fp32_acc``: a strongly typed TensorRT may accumulate fp16 matmuls in fp16 otherwise).
        autocast: under ``precision="fp16"``/``"bf16"``, a rule-based choice of more nodes to keep in float32:
            ``"torch_tensorrt"`` (Torch-TensorRT's ``enable_autocast`` rules with its defaults) or an ``Autocast``
            (its exclusions, output threshold and reduction depth), so that a run verifies what Torch-TensorRT's
            Autocast would build. None (default): only ``fp32_nodes``.
        tf32: float32 MatMul, Gemm and convolutions multiply TF32 values (10-bit mantissa) and accumulate in
            float32, as TensorRT does with ``BuilderFlag.TF32`` (its default, and Torch-TensorRT's). False (default):
            TensorRT's TF32 flag is cleared. ``verify`` judges it like a reduced precision (docs/precision.md#tf32).
        workspace_size: the TensorRT builder's workspace limit in bytes (default 1 GiB); 0 leaves
            TensorRT's own default (the device's memory).
        engine_cache: reuse TensorRT engines built earlier for the same ONNX, TensorRT version, device
            and builder settings (``trtcheck.engines.cache``).
        engine_cache_dir: where cached engines live; None reads ``$TRTCHECK_ENGINE_CACHE_DIR``, else
            ``~/.cache/trtcheck/engines``.
    """

    min_block_size: int = 5
    torch_executed_ops: Sequence[Any] = field(default_factory=list)
    torch_executed_modules: Sequence[str] = field(default_factory=list)
    segmentation: Literal["naive", "dependency_aware", "optimal"] = "dependency_aware"
    require_full_compilation: bool = False
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    fp32_nodes: Sequence[str] = field(default_factory=list)
    use_fp32_acc: bool = False
    autocast: Autocast | str | Mapping[str, Any] | None = None
    tf32: bool = False
    workspace_size: int = 1 << 30
    engine_cache: bool = True
    engine_cache_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        if isinstance(self.autocast, Mapping):  # a repro's settings.json: the fields dataclasses.asdict gave
            self.autocast = Autocast.of(self.autocast)

    @classmethod
    def coerce(cls, settings: Any) -> Settings:
        """The validated ``Settings`` that ``compile``, ``partition`` and ``verify`` take as ``settings=``.

        ``None`` gives the defaults; a ``Settings`` is validated and returned as it is (not copied);
        anything else, a dict included, is a ``SettingsError`` that says how to build a ``Settings``.
        Every entry point calls this once, before lowering, so a bad value fails fast and clearly.
        """
        if settings is None:
            settings = cls()
        elif not isinstance(settings, Settings):
            raise _not_settings(settings)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ``SettingsError`` for any value that cannot mean what the user intended.

        Checks types and values; what the op and module names mean is resolved by ``trtcheck.names``
        (``checked_settings``, which every entry point calls, and ``resolve_modules`` against the model).
        """
        if isinstance(self.min_block_size, bool) or not isinstance(self.min_block_size, int):
            raise SettingsError(
                f"min_block_size must be an int >= 1, got {self.min_block_size!r} "
                f"({type(self.min_block_size).__name__})"
            )
        if self.min_block_size < 1:
            raise SettingsError(
                f"min_block_size must be >= 1, got {self.min_block_size}: use 1 to keep every convertible "
                "node in TensorRT, or a larger value to drop small TensorRT segments"
            )
        if not isinstance(self.segmentation, str) or self.segmentation not in SEGMENTATIONS:
            close = (
                difflib.get_close_matches(self.segmentation, SEGMENTATIONS, n=1, cutoff=0.4)
                if isinstance(self.segmentation, str) else []
            )
            hint = f": did you mean {close[0]!r}?" if close else ""
            raise SettingsError(
                f"segmentation must be one of {', '.join(map(repr, SEGMENTATIONS))}, "
                f"got {self.segmentation!r}{hint}"
            )
        if not isinstance(self.require_full_compilation, bool):
            raise SettingsError(
                f"require_full_compilation must be True or False, got {self.require_full_compilation!r} "
                f"({type(self.require_full_compilation).__name__})"
            )
        _validate_engine_settings(self)
        for name, what in (("torch_executed_ops", "op names"), ("torch_executed_modules", "module names"),
                           ("fp32_nodes", "node or op names")):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)):
                raise SettingsError(f"{name} must be a list of {what}, got the single string {value!r}: "
                                    f"write [{value!r}]")
            if not isinstance(value, (list, tuple, set, frozenset)):
                raise SettingsError(
                    f"{name} must be a list of {what}, got {value!r} ({type(value).__name__}): "
                    f"write [] for none, or e.g. [{_EXAMPLES[name]!r}]"
                )
        for spec in self.fp32_nodes:
            if not isinstance(spec, str) or not spec:
                raise SettingsError(
                    "fp32_nodes entries must be node names of the lowered graph (like 'native_layer_norm') or op "
                    f"names (like 'aten::native_layer_norm'), got {_describe_entry(spec)}"
                )
        for name, value, given, what in (("fp32_nodes", list(self.fp32_nodes), bool(self.fp32_nodes), "nodes"),
                                         ("use_fp32_acc", self.use_fp32_acc, self.use_fp32_acc is True, "matmul sums"),
                                         ("autocast", self.autocast, self.autocast is not None, "nodes")):
            if given and self.precision == "fp32":
                raise SettingsError(
                    f"{name}={value!r} keeps {what} in float32 under a reduced precision, but precision is 'fp32' "
                    f"(every node is float32 already): set precision='fp16' or 'bf16', or drop {name}"
                )
        for spec in self.torch_executed_modules:
            if not isinstance(spec, str):
                raise SettingsError(
                    "torch_executed_modules entries must be strings (a submodule path like 'layer1.0' or a class "
                    f"name like 'BasicBlock'), got {_describe_entry(spec)}"
                )


PRECISIONS = ("fp32", "fp16", "bf16")


def _validate_engine_settings(settings: Settings) -> None:
    """The TensorRT builder's settings: ``precision``, ``workspace_size``, ``engine_cache``, ``engine_cache_dir``."""
    precision = settings.precision
    if not isinstance(precision, str) or precision not in PRECISIONS:
        aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
        spelled = isinstance(precision, str) or type(precision).__name__ == "dtype"  # a torch.dtype, without importing torch
        name = str(precision).removeprefix("torch.") if spelled else ""
        alias = aliases.get(name.lower()) or (name.lower() if name.lower() in PRECISIONS and name != name.lower() else None)
        hint = f": write {alias!r}" if alias else ""
        if name.lower() == "tf32":  # the plugin's --trtcheck-precision spelling: TF32 is float32 with a builder flag
            hint = ": TF32 is float32 with TF32 matmuls and convolutions: write Settings(precision='fp32', tf32=True)"
        raise SettingsError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}{hint}")
    size = settings.workspace_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise SettingsError(
            f"workspace_size must be a number of bytes >= 0 (0: TensorRT's default), got {size!r} "
            f"({type(size).__name__}); e.g. workspace_size=2 << 30 for 2 GiB"
        )
    for name in ("use_fp32_acc", "tf32"):
        value = getattr(settings, name)
        if not isinstance(value, bool):
            raise SettingsError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    policy = Autocast.of(settings.autocast)
    if policy is not None:
        policy.validate()
    if not isinstance(settings.engine_cache, bool):
        raise SettingsError(
            f"engine_cache must be True or False, got {settings.engine_cache!r} ({type(settings.engine_cache).__name__})"
        )
    directory = settings.engine_cache_dir
    if directory is not None and (not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory)):
        raise SettingsError(
            f"engine_cache_dir must be a directory path or None ($TRTCHECK_ENGINE_CACHE_DIR or "
            f"~/.cache/trtcheck/engines), got {directory!r}; engine_cache=False turns the cache off"
        )


_EXAMPLES = {"torch_executed_ops": "aten::relu", "torch_executed_modules": "layer1.0", "fp32_nodes": "native_layer_norm"}
_SETTINGS_FIELDS = tuple(f.name for f in fields(Settings))


def _describe_entry(value: Any) -> str:
    """A non-string ``torch_executed_modules`` entry, and what to write instead when that is clear."""
    torch = sys.modules.get("torch")  # a module passed in means torch is loaded; this module never imports it
    if torch is not None and isinstance(value, torch.nn.Module):
        return (f"a {type(value).__name__} module: write its path in the model (like 'layer1.0'), or its class "
                f"name {type(value).__name__!r} for every instance")
    if isinstance(value, type):
        return f"the class {value.__qualname__}: write {value.__name__!r}"
    return f"{value!r} ({type(value).__name__})"


def _not_settings(value: Any) -> SettingsError:
    if isinstance(value, Mapping):
        unknown = [key for key in value if key not in _SETTINGS_FIELDS]
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), _SETTINGS_FIELDS, n=1, cutoff=0.6)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            return SettingsError(
                f"settings must be a trtcheck.Settings, got a {type(value).__name__}, and it has keys Settings "
                f"does not know: {', '.join(hints)}; the keys are {', '.join(_SETTINGS_FIELDS)}"
            )
        spelled = ", ".join(f"{key}={item!r}" for key, item in value.items())
        return SettingsError(
            f"settings must be a trtcheck.Settings, got a {type(value).__name__}: write trtcheck.Settings(**d), "
            f"here trtcheck.Settings({spelled})"
        )
    return SettingsError(
        f"settings must be a trtcheck.Settings (or None for the defaults), got {value!r} ({type(value).__name__}): "
        f"write e.g. trtcheck.Settings(min_block_size=3)"
    )


_dataclass_init = Settings.__init__


@functools.wraps(_dataclass_init)
def _settings_init(self: Settings, *args: Any, **kwargs: Any) -> None:
    unknown = [key for key in kwargs if key not in _SETTINGS_FIELDS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, _SETTINGS_FIELDS, n=1, cutoff=0.6)
        hint = f": did you mean {close[0]!r}?" if close else f"; the settings are {', '.join(_SETTINGS_FIELDS)}"
        raise UnknownSettingError(f"Settings has no setting {key!r}{hint}")
    _dataclass_init(self, *args, **kwargs)


Settings.__init__ = _settings_init  # type: ignore[method-assign]


