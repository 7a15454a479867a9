"""What a compiled module runs on: the stitched graph, its input check, its thread policy, its profiler.

``stitch`` builds one ``GraphModule`` from engines and Torch segments, ``signature`` checks every call's
inputs against the example's, ``threads`` picks PyTorch's thread count, ``module`` is ``CompiledModule``
and ``profiling`` times each segment of a call. Nothing here converts or builds: that is ``trtcheck.compiler``,
which sits above this package because ``compile`` returns a ``CompiledModule``.
"""

from trtcheck.runtime.module import CompiledModule
from trtcheck.runtime.profiling import Profile, profile

__all__ = ["CompiledModule", "Profile", "profile"]
