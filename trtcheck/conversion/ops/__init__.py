"""trtcheck's built-in converters from core-ATen overloads to ONNX, one module per op family.

Importing this package registers every built-in converter. Ops TensorRT cannot run (e.g.
``aten.lgamma``, ``aten.digamma``) deliberately have none, so the partitioner keeps them in PyTorch.
"""

from trtcheck.conversion.ops import (  # noqa: F401 - imported for their registrations
    activation,
    creation,
    elementwise,
    embedding,
    indexing,
    linear,
    norm,
    padding,
    pool,
    quantize,
    reduction,
    resize,
    scatter,
    shape,
    sorting,
    symbolic,
)
