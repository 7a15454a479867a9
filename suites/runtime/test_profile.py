"""``trtcheck.profile``: every segment and the crossings between them, consistent sums, unchanged results.

No timing thresholds here (timings belong in suites/benchmarks/bench_segments.py): only how the numbers
relate to each other and to the partition.
"""

from __future__ import annotations

import itertools
import types

import pytest
import torch

import trtcheck
from trtcheck.partitioning.partition import boundary_traffic
from trtcheck.runtime.profiling import Profiler
from trtcheck.runtime.stitch import SEGMENT_META, EngineModule


class Mixed(torch.nn.Module):
    """sin forced to PyTorch cuts the model into engine, Torch, engine, Torch, engine; outputs are nested."""

    def forward(self, x, y):
        a = torch.sin(x * 2.0 + y)
        b = torch.sin(a * 3.0 - 1.0)
        return b + y, {"a": a.t() * 2.0, "b": b}


def inputs():
    return torch.randn(3, 4), torch.randn(3, 4)


MANY = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sin"])


@pytest.fixture(scope="module")
def mixed():
    return trtcheck.compile(Mixed(), inputs(), MANY, backend="onnxruntime")


def check_consistent(p: trtcheck.Profile, compiled) -> None:
    segments = compiled.partition.segments
    assert [s.index for s in p.segments] == list(range(len(segments)))
    assert [s.target for s in p.segments] == [s.target.value for s in segments]
    assert all(s.seconds >= 0 for s in p.segments)
    assert sum(s.seconds for s in p.segments) == pytest.approx(p.engine_s + p.torch_s, rel=1e-9, abs=1e-12)
    assert p.engine_s == pytest.approx(sum(s.seconds for s in p.segments if s.target == "tensorrt"), abs=1e-12)
    assert p.torch_s == pytest.approx(sum(s.seconds for s in p.segments if s.target == "torch"), abs=1e-12)
    assert p.total_s >= p.engine_s + p.torch_s and p.boundary_s >= 0
    assert p.boundary_s == pytest.approx(p.total_s - p.engine_s - p.torch_s, abs=1e-12)
    assert p.boundaries == boundary_traffic(compiled.partition.segments)[0]
    assert p.per_boundary_s == (pytest.approx(p.boundary_s / p.boundaries) if p.boundaries else 0.0)


def test_profile_times_every_segment_with_its_target_and_sums_add_up(mixed):
    assert [s.target.value for s in mixed.partition.segments] == ["tensorrt", "torch", "tensorrt", "torch", "tensorrt"]
    p = trtcheck.profile(mixed, inputs(), repeat=5, warmup=1)
    check_consistent(p, mixed)
    # crossing values: x, y into @0; @0's out into @1; a into @2; @2's out into @3; b, y, a into @4
    assert p.engine_s > 0 and p.torch_s > 0 and p.boundaries == 8


def test_profile_takes_the_inputs_spread_or_as_one_tuple(mixed):
    x, y = inputs()
    for p in (trtcheck.profile(mixed, x, y, repeat=2, warmup=0), trtcheck.profile(mixed, (x, y), repeat=2, warmup=0)):
        check_consistent(p, mixed)


def test_to_dict_has_exactly_the_report_fields(mixed):
    d = trtcheck.profile(mixed, inputs(), repeat=2, warmup=0).to_dict()
    assert list(d) == ["total_s", "engine_s", "torch_s", "boundary_s", "boundaries", "per_boundary_s", "segments"]
    assert [list(s) for s in d["segments"]] == [["index", "target", "seconds"]] * 5
    assert isinstance(d["boundaries"], int)


def test_profiled_run_returns_what_the_compiled_module_returns(mixed):
    x, y = inputs()
    expected = mixed(x, y)
    got = Profiler(mixed).run(x, y)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert got[1]["a"].stride() == expected[1]["a"].stride()  # the layout after an engine is restored too
    torch.testing.assert_close(got, Mixed()(x, y))


def test_profiling_leaves_the_compiled_module_and_its_engines_as_they_were(mixed):
    code = mixed.graph_module.code
    trtcheck.profile(mixed, inputs(), repeat=2, warmup=0)
    assert mixed.graph_module.code == code
    assert all(engine.run_times is None for engine in mixed.engines.values())


def test_engine_time_is_the_time_inside_the_run_and_crossings_are_not(mixed, monkeypatch):
    """The engine's clock ticks 1 us per reading: a segment's time is then exactly one tick per run."""
    import trtcheck.engines.onnxruntime as ort_engine

    ticks = itertools.count(0, 1000)
    monkeypatch.setattr(ort_engine, "time", types.SimpleNamespace(perf_counter_ns=lambda: next(ticks)))
    profiler = Profiler(mixed)
    profiler.run(*inputs())
    p = profiler.result()
    assert [s.seconds for s in p.segments if s.target == "tensorrt"] == [pytest.approx(1e-6)] * 3
    assert p.engine_s == pytest.approx(3e-6)


def test_stitched_nodes_carry_their_segment_index(mixed):
    graph = mixed.graph_module.graph
    for node in graph.nodes:
        if node.op == "call_module":
            assert isinstance(mixed.graph_module.get_submodule(node.target), EngineModule)
            assert node.meta[SEGMENT_META] == mixed.graph_module.get_submodule(node.target).segment_index
    marked = [node.meta.get(SEGMENT_META) for node in graph.nodes if SEGMENT_META in node.meta]
    assert marked == sorted(marked) and set(marked) == set(range(5))  # contiguous, in segment order
    for segment in mixed.partition.segments:  # the lowered graph's own nodes are not marked
        assert all(SEGMENT_META not in node.meta for node in segment.nodes)


def test_profile_of_a_model_with_only_torch_segments():
    settings = trtcheck.Settings(min_block_size=100)  # every TensorRT segment is too small: all PyTorch
    compiled = trtcheck.compile(Mixed(), inputs(), settings, backend="onnxruntime")
    assert not compiled.engines
    p = trtcheck.profile(compiled, inputs(), repeat=3, warmup=1)
    check_consistent(p, compiled)
    assert [s.target for s in p.segments] == ["torch"] and p.engine_s == 0
    assert p.boundaries == 0 and p.per_boundary_s == 0.0


def test_profile_of_a_model_with_one_engine():
    compiled = trtcheck.compile(Mixed(), inputs(), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert len(compiled.engines) == 1 and len(compiled.partition.segments) == 1
    p = trtcheck.profile(compiled, inputs(), repeat=3, warmup=1)
    check_consistent(p, compiled)
    assert [s.target for s in p.segments] == ["tensorrt"] and p.torch_s == 0 and p.engine_s > 0
    assert p.boundaries == 2  # both graph inputs cross into the engine


def test_profile_of_a_model_taking_a_list():
    """``forward(xs)``: ``profile(m, (xs,))`` and ``profile(m, xs)`` both mean the one list input."""
    import trtcheck_zoo as models

    model, inputs = models.get("list_input").build()
    compiled = trtcheck.compile(model, inputs, trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    for given in ((inputs,), tuple(inputs)):
        assert trtcheck.profile(compiled, *given, repeat=2, warmup=0).total_s > 0
