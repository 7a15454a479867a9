"""The compiler: from a model to a ``CompiledModule``, each phase returning its own result.

``front`` is the front half (lower, partition, analyse shapes), ``convert`` turns every TensorRT segment (and
every branch's) into ONNX, ``engine_build`` builds their engines with every failure contained (a segment that
fails falls back to PyTorch in a new ``Partition``, and is reported), and ``pipeline`` is ``compile``, the whole
pipeline, lowering to stitching. ``clock`` times each phase.
"""

from trtcheck.compiler.clock import CompileTimes
from trtcheck.compiler.pipeline import compile

__all__ = ["CompileTimes", "compile"]
