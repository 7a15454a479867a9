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
