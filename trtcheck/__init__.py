"""trtcheck: prove that a PyTorch model split between TensorRT and PyTorch still computes what it did."""

from trtcheck import converters  # noqa: F401 - the documented registry API, trtcheck.converters.register
from trtcheck.compiler import CompilationError, CompileTimes, compile
from trtcheck.errors import (
    BackendError,
    BackendUnavailableError,
    EngineRuntimeError,
    InputDomainError,
    LoweringError,
    NondeterministicModelError,
    PartitionError,
    SettingsError,
    TrtcheckError,
)
from trtcheck.lowering import lower
from trtcheck.partitioning import Partition, Reason, ReasonKind, Segment, Target, partition
from trtcheck.profiling import Profile, profile
from trtcheck.settings import Settings
from trtcheck.stitching import CompiledModule, InputMismatchError
from trtcheck.verification import VerificationError, VerificationReport, Violation, check_invariants, verify

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "CompiledModule",
    "EngineRuntimeError",
    "InputDomainError",
    "NondeterministicModelError",
    "CompilationError",
    "CompileTimes",
    "compile",
    "InputMismatchError",
    "LoweringError",
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
    "verify",
    "lower",
    "partition",
    "profile",
]
__version__ = "0.1.0"
