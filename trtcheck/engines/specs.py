"""What an engine is built for: each input's and output's ``TensorSpec``, each dynamic input's ``ShapeRange``, and
the backend's ``EngineOptions``.

Shape analysis (``trtcheck.shapes``) makes the specs from a segment's boundary values and the compiler makes the
options from ``Settings``; the engines take them and know nothing of segments, partitions or settings (import-linter
contracts keep ``engines`` from importing ``partitioning``, ``conversion`` and the compiler).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

DEFAULT_WORKSPACE_BYTES = 1 << 30


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and dtype of one engine input or output.

    Segments are cut from a graph carrying fake-tensor metadata, so every shape is known when the
    engine is built. That is what lets engines check calls cheaply and pre-allocate their outputs.
    A negative dimension means "not known at build time": a size that varies with a ``torch.export.Dim``
    (it matches any size on input, ``ShapeRange`` bounds it, and the backend allocates that output).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        # Normalise torch.Size / lists to a plain tuple so equality and hashing behave.
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def is_static(self) -> bool:
        """True when every dimension is known, so a buffer can be allocated before running."""
        return all(d >= 0 for d in self.shape)

    def matches_shape(self, shape: Sequence[int]) -> bool:
        """True when ``shape`` fits this spec (negative spec dimensions accept any size)."""
        return len(shape) == len(self.shape) and all(e < 0 or e == g for e, g in zip(self.shape, shape))

    @classmethod
    def like(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        """The spec of ``tensor`` under ``name``: handy for tests and for callers holding examples."""
        return cls(name, tuple(tensor.shape), tensor.dtype)


@dataclass(frozen=True)
class ShapeRange:
    """The shapes one engine input accepts: TensorRT optimizes for ``opt`` and runs anything in [min, max]."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("min", "opt", "max"):
            object.__setattr__(self, name, tuple(int(d) for d in getattr(self, name)))
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError(f"min {self.min}, opt {self.opt} and max {self.max} must have the same rank")
        if any(d < 0 for d in self.min):
            raise ValueError(f"min {self.min} has a negative dimension; a range needs known bounds")
        if not all(lo <= o <= hi for lo, o, hi in zip(self.min, self.opt, self.max)):
            raise ValueError(f"need min <= opt <= max in every dimension, got min {self.min}, opt {self.opt}, max {self.max}")

    @classmethod
    def static(cls, shape: Sequence[int]) -> ShapeRange:
        """The range of a static input: exactly ``shape``."""
        return cls(tuple(shape), tuple(shape), tuple(shape))

    @property
    def is_static(self) -> bool:
        return self.min == self.opt == self.max

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max))


@dataclass(frozen=True)
class EngineOptions:
    """How a backend builds a finished ONNX graph: what it does besides running the graph's own types.

    ``tf32``: float32 matmuls and convolutions on 10-bit mantissas (TensorRT: ``BuilderFlag.TF32``, else cleared;
    ONNX Runtime rounds their factors, ``emulation.emulate_tf32``). ``workspace_size``, ``engine_cache`` and
    ``engine_cache_dir``: TensorRT's workspace limit and engine cache (``trtcheck.engines.cache``).

    ``precision``, ``fp32_nodes``, ``use_fp32_acc`` and ``autocast`` (``dataclasses.asdict`` of the policy, or None)
    say how the compiler made the graph (``trtcheck.compiler.mixed_precision``). No backend acts on them: the graph
    carries its types. TensorRT names the precision in its errors and records all four in its cache entries, so that
    an entry says what it was built for. The compiler makes one value from ``Settings`` (``engine_build.engine_options``).
    """

    tf32: bool = False
    workspace_size: int = DEFAULT_WORKSPACE_BYTES
    engine_cache: bool = True
    engine_cache_dir: str | os.PathLike | None = None
    precision: str = "fp32"
    fp32_nodes: tuple[str, ...] = ()
    use_fp32_acc: bool = False
    autocast: Mapping[str, Any] | None = field(default=None, hash=False)
