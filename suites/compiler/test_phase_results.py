"""No phase edits an earlier phase's result: each returns its own.

The partition that partitioning made, and its branches' partitions, are what the determinism check compares
and a repro records, so compile must leave them as they were even where engine builds fail (the fallbacks go to
a new ``Partition``: ``with_fallbacks``) and where branches are stitched (``stitch`` takes them; no stitched
graph is edited afterwards). The check is by value: a snapshot of everything a partition holds (every segment's
target, nodes and flags, every reason, the fallbacks, the sub-partitions' identities), taken when conversion
returns, compared with the same once compile has returned.
"""

from __future__ import annotations

import pytest
import torch

import trtcheck
import trtcheck.compiler.engine_build as engine_build
import trtcheck.compiler.pipeline as pipeline
import trtcheck_zoo as models
from trtcheck import Target
from trtcheck.partitioning.partition import Partition


def _snapshot(partition: Partition) -> list:
    """Everything a partition and its branches hold, as values (segment objects and lists compared by identity too,
    so a segment edited in place and one replaced both show)."""
    return [
        (path, [(id(s), s.target, id(s.nodes), list(s.nodes), s.do_not_merge) for s in part.segments],
         id(part.segments), dict(part.reasons), list(part.fallbacks), {n: id(p) for n, p in part.branches.items()})
        for path, part in partition.walk()
    ]


@pytest.fixture
def recorded(monkeypatch):
    """Conversions of every compile from now on, each with its partition's snapshot when conversion returned."""
    seen = []
    convert = pipeline.convert

    def recording(*args, **kwargs):
        conversion = convert(*args, **kwargs)
        seen.append((conversion, _snapshot(conversion.partition)))
        return conversion

    monkeypatch.setattr(pipeline, "convert", recording)
    return seen


@pytest.fixture
def built(monkeypatch):
    """Every engine build's result from now on (branches' and the model's), with its partition's snapshot when
    the build returned: stitching comes after, and must not edit it."""
    seen = []
    build = engine_build.build_engines

    def recording(*args, **kwargs):
        result = build(*args, **kwargs)
        seen.append((result.partition, _snapshot(result.partition)))
        return result

    monkeypatch.setattr(engine_build, "build_engines", recording)  # what build_branches calls
    monkeypatch.setattr(pipeline, "build_engines", recording)
    return seen


def _failing_first_build(monkeypatch) -> None:
    """The first engine build of the compile raises (an engine limitation, as a backend would refuse it)."""
    build = engine_build.build_engine
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("planted engine build failure")
        return build(*args, **kwargs)

    monkeypatch.setattr("trtcheck.compiler.engine_build.build_engine", flaky)


class TwoEngines(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.lgamma(torch.relu(x) + 1) * 2).sin() + 1


def test_engine_build_fallbacks_leave_the_partition_partitioning_made(monkeypatch, recorded):
    support = lambda node: node.target is not torch.ops.aten.lgamma.default  # noqa: E731 - a one-line rule
    _failing_first_build(monkeypatch)
    compiled = trtcheck.compile(TwoEngines(), (torch.rand(5) + 0.5,), trtcheck.Settings(min_block_size=1), support=support)
    ((conversion, before),) = recorded
    assert compiled.partition.fallbacks and "planted engine build failure" in compiled.partition.fallbacks[0]
    assert compiled.partition is not conversion.partition
    assert [s.target for s in conversion.partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    assert [s.target for s in compiled.partition.segments] == [Target.TORCH, Target.TENSORRT]
    assert _snapshot(conversion.partition) == before
    assert len(compiled.engines) == 1


@pytest.mark.parametrize("fail", [False, True], ids=["built", "a-branch-engine-fails"])
def test_stitching_branches_leaves_every_partition_as_made(monkeypatch, recorded, built, fail):
    model, inputs = models.get("cond_branches").build()
    if fail:
        _failing_first_build(monkeypatch)  # branches are built first: a branch's engine fails
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=5))
    ((conversion, before),) = recorded
    assert _snapshot(conversion.partition) == before
    assert len(built) == 3 and all(_snapshot(partition) == snapshot for partition, snapshot in built)  # 2 branches, the model
    assert bool(compiled.partition.fallbacks) == fail
    for name, sub in compiled.partition.branches.items():
        assert sub is getattr(compiled.graph_module, name).partition  # the partition each stitched branch runs
