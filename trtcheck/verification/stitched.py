"""The stitched graph's own soundness: well formed, and every engine output read in the layout it was traced on.

The partition's invariants (``invariants``) say which node runs where; these say that stitching built what the
partition describes. What counts as an engine output read in the wrong layout is the runtime's to say
(``runtime.stitch.unrestrided_engine_outputs``): this module reads no stitching internals.
"""

from __future__ import annotations

import torch.fx

from trtcheck.runtime.stitch import stitched_branches, unrestrided_engine_outputs
from trtcheck.verification.invariants import Violation


def stitched_graph_violations(stitched: torch.fx.GraphModule) -> list[Violation]:
    """The stitched graph must be well formed, and engine outputs must carry the layout their users were traced on;
    the same in every stitched branch of ``torch.cond`` / ``while_loop``, recursively, each violation naming it."""
    try:
        stitched.graph.lint()
    except Exception as error:  # noqa: BLE001 - lint raises RuntimeError today; any failure is a violation
        return [Violation("stitched_graph", f"{type(error).__name__}: {error}")]
    found = [
        Violation(
            "layout",
            f"{node.name} leaves engine {node.args[0].target} contiguous, but export recorded strides {stride} "
            f"for it and {', '.join(bare)} read it as it is",
        )
        for node, stride, bare in unrestrided_engine_outputs(stitched)
    ]
    for name, branch in stitched_branches(stitched):
        found += [violation.inside(name) for violation in stitched_graph_violations(branch)]
    return found
