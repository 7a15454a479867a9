"""Lowering: any ``nn.Module`` (or ``ExportedProgram``) to a core-ATen ``torch.fx.GraphModule``.

``export`` runs ``torch.export`` and the core-ATen decompositions (``decompositions`` holds trtcheck's
corrections to PyTorch's table), ``symbols`` keeps the ranges of dynamic sizes, ``graph`` the graph facts
every later phase reads (mutable state, copies).
"""

from trtcheck.lowering.export import LoweringCache, independent_inputs, lower, lower_program
from trtcheck.lowering.graph import copy_graph_module, is_mutable_state, own_mutable_state
from trtcheck.lowering.symbols import dim_names, size_hint, symbol_ranges, value_bytes

__all__ = [
    "LoweringCache",
    "copy_graph_module",
    "dim_names",
    "independent_inputs",
    "is_mutable_state",
    "lower",
    "lower_program",
    "own_mutable_state",
    "size_hint",
    "symbol_ranges",
    "value_bytes",
]
