"""Eager's value of every node of a lowered graph: what localization, reduction and the range findings read.

A failing comparison is explained from eager's own values inside the graph: localization feeds them to each engine
(its local error), reduction to every sub-engine it tries, and the fp16/bf16 range findings read them for the nodes
that leave the format's range. They are recorded by running the graph's nodes one by one, on any subset of them,
so that eager's values and the compiled module's upstream values share one code path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.fx

from trtcheck.verification.state import restore_state, snapshot_state

Values = dict[torch.fx.Node, Any]


def run_nodes(gm: torch.fx.GraphModule, nodes: Iterable[torch.fx.Node], env: Values) -> Values:
    """Run ``nodes`` of ``gm`` in PyTorch, in order, reading and writing ``env`` (node -> value); ``env`` returned.

    A ``get_attr`` reads the graph's attribute; a placeholder must already be in ``env``. Like
    ``torch.fx.Interpreter``, but on any subset, so eager's and the compiled module's values share one code path.
    """
    lookup = env.__getitem__
    for node in nodes:
        if node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part)
            env[node] = value
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, lookup)
            kwargs = torch.fx.node.map_arg(node.kwargs, lookup)
            env[node] = node.target(*args, **kwargs)
    return env


def record_eager(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> Values:
    """Eager's value of every node of the lowered graph ``gm`` on ``flat_inputs`` (its placeholders' values).

    The graph's mutable state (buffers it writes) is restored afterwards: recording must not change the
    compiled module it localizes."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    env: Values = dict(zip(placeholders, flat_inputs))
    state = snapshot_state(gm)
    try:
        with torch.no_grad():
            return run_nodes(gm, gm.graph.nodes, env)
    finally:
        restore_state(gm, state)
