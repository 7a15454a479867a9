"""Build: from a partition to a ``CompiledModule``.

``convert`` turns every TensorRT segment (and every branch's) into ONNX, ``engine_build`` builds their
engines with every failure contained (a segment that fails falls back to PyTorch and is reported), and
``compile`` runs the whole pipeline, lowering to stitching. ``clock`` times each phase.
"""

from trtcheck.build.clock import CompileTimes
from trtcheck.build.compile import compile

__all__ = ["CompileTimes", "compile"]
