"""The documented registry API, ``trtcheck.converters.register`` & co., kept as a thin shim.

The converters, the registry and the interpreter live in :mod:`trtcheck.conversion` (see its
docstring); this module only re-exports the public registry names so existing user code keeps working.
"""

import trtcheck.conversion  # noqa: F401 - populates the registry with the built-in converters
from trtcheck.conversion.registry import (
    Converter,
    Snapshot,
    get,
    is_convertible,
    register,
    registered_targets,
    unregister,
)

__all__ = ["Converter", "Snapshot", "get", "is_convertible", "register", "registered_targets", "unregister"]
