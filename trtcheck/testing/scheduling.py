"""pytest-xdist scheduling for the verification matrix: every preset of one zoo model on one worker.

The matrix lowers each zoo model once per process and partitions every preset from that lowering
(``trtcheck_lowered``); lowering (twice, the first time, for its determinism check) is most of what a
preset costs. xdist's default ``--dist load`` hands tests out one by one, so a model's presets landed on
every worker and each worker lowered it. ``--dist loadgroup`` would keep them together, but pytest-xdist
3.8 names a group by rewriting ``item._nodeid``, which pytest 9 no longer reads, so its groups are silently
ignored. ``ModelScheduling`` groups by the test id instead: the plugin's matrix ids start with the zoo
model's name (``test_zoo_model[resnet18-torch_relu]``).

The order units are handed out in decides how evenly the workers finish (``work_order``): a worker takes its next
unit when it is almost done with its last, so the run ends when the last unit handed out ends. xdist hands out the
largest units first, which put the lone tests last; in the matrix those are the random-graph fuzzers (27 s, half a
minute one worker ran alone at the end, while the others sat idle). Lone tests go first now, then the models' units
from the largest.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sized
from typing import Any

from xdist.scheduler import LoadScopeScheduling

__all__ = ["ModelScheduling", "model_scope", "work_order"]


def model_scope(nodeid: str, models: frozenset[str]) -> str:
    """The unit of work ``nodeid`` belongs to: ``<test>[<model>`` for a test parametrized by a zoo model (its id's
    first ``-``-separated part is one of ``models``), else the test alone."""
    test, bracket, params = nodeid.partition("[")
    if bracket:
        first = params.removesuffix("]").split("-", 1)[0]
        if first in models:
            return f"{test}[{first}"
    return nodeid


def work_order(units: Mapping[str, Sized]) -> list[str]:
    """The order to hand out ``units`` (scope -> its tests) in: the lone tests first, in collection order, then the
    units of several tests from the largest, so that the smallest come last and the workers finish close together."""
    return sorted(units, key=lambda scope: (len(units[scope]) > 1, -len(units[scope])))  # stable: ties keep their order


class ModelScheduling(LoadScopeScheduling):
    """xdist's ``loadscope`` scheduling over ``model_scope``'s units: tests of other kinds are each their own unit
    (handed out as ``load`` would), a zoo model's tests one unit, in ``work_order`` (which takes the place of xdist's
    ``--loadscope-reorder``, with or without it). ``workqueue`` and ``_assign_work_unit`` are xdist 3.8's own: a test
    runs this scheduler under xdist (``suites/testing/test_plugin.py``)."""

    def __init__(self, config: Any, log: Any = None, models: Iterable[str] = ()) -> None:
        super().__init__(config, log)
        self._models = frozenset(models)
        self._ordered = False

    def _assign_work_unit(self, node: Any) -> None:
        """xdist's, with its queue (built by ``schedule``, in collection order or largest first) put in ``work_order``
        before the first unit is handed out."""
        if not self._ordered:
            self._ordered = True
            self.workqueue = OrderedDict((scope, self.workqueue[scope]) for scope in work_order(self.workqueue))
        super()._assign_work_unit(node)

    def _split_scope(self, nodeid: str) -> str:
        return model_scope(nodeid, self._models)
