"""trtcheck: prove that a PyTorch model split between TensorRT and PyTorch still computes what it did.

The public API, one name per phase of the pipeline: ``lower`` (torch.export to core ATen), ``partition``
(TensorRT and Torch segments, and why), ``compile`` (engines stitched with Torch segments), ``verify``
(invariants and equivalence against eager), ``profile``, and their data (``Settings``, ``Autocast``: the policy of
``Settings.autocast``, ``Partition``, ``CompiledModule``, ``VerificationReport``) and errors. Custom converters are
registered through ``trtcheck.conversion`` (``register``, ``unregister``, ``get``, ``Snapshot``).

Names are imported on first use (PEP 562), so ``import trtcheck`` and the ``trtcheck`` command start
without importing torch: ``trtcheck --help`` answers at once, and the pytest plugin costs nothing in a
session that never uses it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC: dict[str, str] = {
    "lower": "trtcheck.lowering",
    "partition": "trtcheck.dynamo",
    "Partition": "trtcheck.partitioning",
    "Segment": "trtcheck.partitioning",
    "Target": "trtcheck.partitioning",
    "Reason": "trtcheck.partitioning",
    "ReasonKind": "trtcheck.partitioning",
    "compile": "trtcheck.dynamo",
    "CompileTimes": "trtcheck.compiler",
    "CompiledModule": "trtcheck.runtime",
    "Profile": "trtcheck.runtime",
    "profile": "trtcheck.runtime",
    "verify": "trtcheck.verification",
    "check_invariants": "trtcheck.verification",
    "VerificationReport": "trtcheck.verification",
    "Violation": "trtcheck.verification",
    "Settings": "trtcheck.settings",
    "Autocast": "trtcheck.settings",
    "TrtcheckError": "trtcheck.errors",
    "SettingsError": "trtcheck.errors",
    "LoweringError": "trtcheck.errors",
    "DynamicShapesError": "trtcheck.errors",
    "PartitionError": "trtcheck.errors",
    "CompilationError": "trtcheck.errors",
    "BackendError": "trtcheck.errors",
    "BackendUnavailableError": "trtcheck.errors",
    "InputMismatchError": "trtcheck.errors",
    "EngineRuntimeError": "trtcheck.errors",
    "NondeterministicModelError": "trtcheck.errors",
    "InputDomainError": "trtcheck.errors",
    "VerificationError": "trtcheck.errors",
}

__all__ = [
    "Autocast",
    "BackendError",
    "BackendUnavailableError",
    "CompilationError",
    "CompileTimes",
    "CompiledModule",
    "DynamicShapesError",
    "EngineRuntimeError",
    "InputDomainError",
    "InputMismatchError",
    "LoweringError",
    "NondeterministicModelError",
    "Partition",
    "PartitionError",
    "Profile",
    "Reason",
    "ReasonKind",
    "Segment",
    "Settings",
    "SettingsError",
    "Target",
    "TrtcheckError",
    "VerificationError",
    "VerificationReport",
    "Violation",
    "check_invariants",
    "compile",
    "lower",
    "partition",
    "profile",
    "verify",
]  # the same names as _PUBLIC (suites/test_architecture.py checks)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'trtcheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from trtcheck.compiler import CompileTimes, compile
    from trtcheck.errors import (
        BackendError,
        BackendUnavailableError,
        CompilationError,
        DynamicShapesError,
        EngineRuntimeError,
        InputDomainError,
        InputMismatchError,
        LoweringError,
        NondeterministicModelError,
        PartitionError,
        SettingsError,
        TrtcheckError,
        VerificationError,
    )
    from trtcheck.lowering import lower
    from trtcheck.partitioning import Partition, Reason, ReasonKind, Segment, Target, partition
    from trtcheck.runtime import CompiledModule, Profile, profile
    from trtcheck.settings import Autocast, Settings
    from trtcheck.verification import VerificationReport, Violation, check_invariants, verify
