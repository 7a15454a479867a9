"""pytest-xdist scheduling for the verification matrix: every preset of one zoo model on one worker.

The matrix lowers each zoo model once per process and partitions every preset from that lowering
(``trtcheck_lowered``); lowering (twice, the first time, for its determinism check) is most of what a
preset costs. xdist's default ``--dist load`` hands tests out one by one, so a model's presets landed on
every worker and each worker lowered it. ``--dist loadgroup`` would keep them together, but pytest-xdist
3.8 names a group by rewriting ``item._nodeid``, which pytest 9 no longer reads, so its groups are silently
ignored. ``ModelScheduling`` groups by the test id instead: the plugin's matrix ids start with the zoo
model's name (``test_zoo_model[resnet18-torch_relu]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xdist.scheduler import LoadScopeScheduling

__all__ = ["ModelScheduling", "model_scope"]


def model_scope(nodeid: str, models: frozenset[str]) -> str:
    """The unit of work ``nodeid`` belongs to: ``<test>[<model>`` for a test parametrized by a zoo model (its id's
    first ``-``-separated part is one of ``models``), else the test alone."""
    test, bracket, params = nodeid.partition("[")
    if bracket:
        first = params.removesuffix("]").split("-", 1)[0]
        if first in models:
            return f"{test}[{first}"
    return nodeid


class ModelScheduling(LoadScopeScheduling):
    """xdist's ``loadscope`` scheduling over ``model_scope``'s units: tests of other kinds are each their own unit
    (handed out as ``load`` would), a zoo model's tests one unit, largest units first (``--loadscope-reorder``,
    xdist's default)."""

    def __init__(self, config: Any, log: Any = None, models: Iterable[str] = ()) -> None:
        super().__init__(config, log)
        self._models = frozenset(models)

    def _split_scope(self, nodeid: str) -> str:
        return model_scope(nodeid, self._models)
