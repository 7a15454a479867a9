"""trtcheck's converters from core-ATen overloads to ONNX, one module per op family.

Importing this package registers every built-in converter. Ops TensorRT cannot run (e.g.
``aten.lgamma``, ``aten.digamma``) deliberately have none, so the partitioner keeps them in PyTorch.
"""

from trtcheck.converters import (  # noqa: F401 - imported for their registrations
    activation,
    creation,
    elementwise,
    indexing,
    linear,
    norm,
    pool,
    reduction,
    shape,
)
from trtcheck.converters.registry import (
    Converter,
    Snapshot,
    get,
    is_convertible,
    register,
    registered_targets,
    unregister,
)

__all__ = ["Converter", "Snapshot", "get", "is_convertible", "register", "registered_targets", "unregister"]
