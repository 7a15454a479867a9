"""An on-disk cache of serialized TensorRT engines ("plans"), so a model is built once per machine, not per run.

Building a TensorRT engine takes seconds to minutes per segment (the builder times kernels); the ONNX
model of a segment is byte-identical from one run to the next (``verify`` checks that), so the plan can
be reused. A plan is only valid for the TensorRT version that built it, the GPU model (its compute
capability and more) and the builder settings, so all of these are part of the key:

- the SHA-256 of the ONNX bytes TensorRT's parser gets: the segment's *precision graph* (the mixed-precision model
  of ``precision="fp16"``/``"bf16"``, ``fp32_nodes``, ``use_fp32_acc`` and ``autocast``: what TensorRT 11 computes
  is the graph's types, so the graph is the key), with its weights' values in it (the TensorRT backend is given a
  self-contained model: a weight changed in place changes the key);
- ``tensorrt.__version__``,
- the device: its name and compute capability,
- the builder settings: precision, ``tf32`` (``BuilderFlag.TF32``), the float32 node set, ``use_fp32_acc``, the
  autocast policy, workspace limit, strong typing, the optimization profile (min/opt/max per input), and this
  cache's ``FORMAT_VERSION``.

Every entry is stored with a header holding the whole key and the plan's length and SHA-256, and is
verified on load: an entry that is truncated, corrupt, written for another key (stale) or in another
format is deleted and reported as a miss, so the caller rebuilds it; a plan is never trusted because
of its file name alone. Writes are atomic (``trtcheck.atomic.atomic_write``): concurrent builders of the
same segment (xdist workers) each write a whole file, and the last rename wins.

The directory is ``Settings.engine_cache_dir``, else ``$TRTCHECK_ENGINE_CACHE_DIR``, else
``$XDG_CACHE_HOME/trtcheck/engines`` (``~/.cache/trtcheck/engines``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtcheck.atomic import atomic_write

__all__ = ["CACHE_DIR_ENV", "FORMAT_VERSION", "CacheKey", "EngineCache", "default_cache_dir"]

CACHE_DIR_ENV = "TRTCHECK_ENGINE_CACHE_DIR"
FORMAT_VERSION = 2  # 2: TensorRT 11's strongly typed builds (the precision graph, tf32 in the key)
_MAGIC = b"TRTCHECK-ENGINE\n"
_LENGTH = struct.Struct(">Q")  # the header's length, in bytes, after the magic


def default_cache_dir() -> Path:
    """``$TRTCHECK_ENGINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trtcheck/engines``, else ``~/.cache/trtcheck/engines``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trtcheck" / "engines"


def _canonical(value: Any) -> Any:
    """``value`` with tuples as lists and mapping keys as strings: what a JSON round trip gives back."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise TypeError(f"cache key values must be JSON data, got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class CacheKey:
    """Everything a serialized engine depends on. ``digest`` names its file; ``fields`` is checked on load."""

    onnx_sha256: str
    tensorrt_version: str
    device_name: str
    compute_capability: tuple[int, int]
    builder: Mapping[str, Any] = field(default_factory=dict)
    """The builder settings: precision, workspace, strong typing, the optimization profile, ..."""

    @classmethod
    def of(
        cls,
        onnx_bytes: bytes,
        *,
        tensorrt_version: str,
        device_name: str,
        compute_capability: tuple[int, int],
        builder: Mapping[str, Any],
    ) -> CacheKey:
        return cls(
            onnx_sha256=hashlib.sha256(onnx_bytes).hexdigest(),
            tensorrt_version=str(tensorrt_version),
            device_name=str(device_name),
            compute_capability=(int(compute_capability[0]), int(compute_capability[1])),
            builder=_canonical(builder),
        )

    @property
    def fields(self) -> dict[str, Any]:
        """The key as JSON data (tuples as lists), exactly as stored in an entry's header."""
        return _canonical(
            {
                "format": FORMAT_VERSION,
                "onnx_sha256": self.onnx_sha256,
                "tensorrt_version": self.tensorrt_version,
                "device_name": self.device_name,
                "compute_capability": self.compute_capability,
                "builder": self.builder,
            }
        )

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of ``fields``: one file per distinct key."""
        text = json.dumps(self.fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


class EngineCache:
    """Serialized engines under ``directory``, one ``<digest>.engine`` file per key.

    ``load`` returns the plan bytes of a verified entry, or None (a miss, with the reason in
    ``last_miss``); ``store`` writes atomically and returns the path, or None when the directory cannot be
    written (a warning says so: the engine just built is used anyway, only the cache is lost);
    ``discard`` deletes an entry that verified but that TensorRT then refused to deserialize.
    """

    suffix = ".engine"

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()
        self.last_miss: str | None = None

    def path(self, key: CacheKey) -> Path:
        return self.directory / f"{key.digest}{self.suffix}"

    def load(self, key: CacheKey) -> bytes | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.last_miss = "no entry"
            return None
        except OSError as error:
            self.last_miss = f"unreadable entry {path} ({error})"
            return None
        problem = _verify(data, key)
        if isinstance(problem, str):
            self.last_miss = f"{problem}; rebuilt"
            self._remove(path)
            return None
        self.last_miss = None
        return problem

    def store(self, key: CacheKey, plan: bytes) -> Path | None:
        header = json.dumps(
            {
                "key": key.fields,
                "digest": key.digest,
                "plan_bytes": len(plan),
                "plan_sha256": hashlib.sha256(plan).hexdigest(),
            },
            sort_keys=True,
        ).encode()
        path = self.path(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return atomic_write(path, lambda f: (f.write(_MAGIC), f.write(_LENGTH.pack(len(header))), f.write(header), f.write(plan)))
        except OSError as error:
            warnings.warn(
                f"trtcheck: could not write the TensorRT engine cache entry {path} ({error}); the engine is used "
                f"but will be rebuilt next time. Set Settings(engine_cache_dir=...) or ${CACHE_DIR_ENV} to a "
                "writable directory, or engine_cache=False",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def discard(self, key: CacheKey, why: str) -> None:
        """Delete ``key``'s entry (it verified, but TensorRT refused it: ``why``); the next load misses."""
        self.last_miss = f"{why}; rebuilt"
        self._remove(self.path(key))

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:  # already gone (another process), or read-only: a later store replaces it
            pass


def _verify(data: bytes, key: CacheKey) -> bytes | str:
    """The plan stored in ``data`` when its header matches ``key`` and its hash; else why it does not."""
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _LENGTH.size:
        return "corrupt entry (not a trtcheck engine file)"
    start = len(_MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack_from(data, len(_MAGIC))
    if start + length > len(data):
        return "corrupt entry (truncated header)"
    try:
        header = json.loads(data[start:start + length])
        stored_key, plan_bytes, plan_sha256 = header["key"], header["plan_bytes"], header["plan_sha256"]
    except (ValueError, TypeError, KeyError):
        return "corrupt entry (unreadable header)"
    if stored_key != key.fields:
        if isinstance(stored_key, dict):
            differs = sorted(k for k in set(stored_key) | set(key.fields) if stored_key.get(k) != key.fields.get(k))
        else:
            differs = ["all"]
        return f"stale entry (built for another {', '.join(differs)})"
    plan = data[start + length:]
    if len(plan) != plan_bytes or hashlib.sha256(plan).hexdigest() != plan_sha256:
        return f"corrupt entry (plan of {len(plan)} bytes does not match its recorded length {plan_bytes} and SHA-256)"
    return plan
