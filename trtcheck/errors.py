"""The exception hierarchy: every error trtcheck raises on bad input is a ``TrtcheckError``.

Each message names the problem and the fix, so a user never has to read an internal traceback.
"""

from __future__ import annotations


class TrtcheckError(Exception):
    """Base class of every error trtcheck raises deliberately."""


class SettingsError(TrtcheckError, ValueError):
    """A ``Settings`` value is invalid: an unknown op or module name, a min_block_size below 1, ..."""


class LoweringError(TrtcheckError):
    """The model could not be lowered to a core-ATen ``torch.fx`` graph."""


class PartitionError(TrtcheckError):
    """Partitioning could not satisfy the settings (e.g. ``require_full_compilation``)."""


class BackendError(TrtcheckError, ValueError):
    """An engine backend name is unknown, or names a backend that cannot run on this machine."""


class BackendUnavailableError(BackendError):
    """An explicitly requested backend is missing here (its package, or a CUDA device).

    Raised before anything is lowered or converted: a run that silently fell back to PyTorch everywhere
    would pass verification having converted nothing.
    """


class EngineRuntimeError(TrtcheckError, RuntimeError):
    """A built engine failed while running; the message names the segment and the backend."""


class NondeterministicModelError(TrtcheckError, AssertionError):
    """Eager PyTorch disagrees with itself on identical calls, so no comparison with it can mean anything."""


class InputDomainError(TrtcheckError, ValueError):
    """Eager PyTorch itself failed on an input set trtcheck generated: the model's inputs are constrained."""
