"""``bench_boundary``: the gate's chain at several shapes, split by ``trtcheck.profile`` (docs/performance.md quotes it)."""

from __future__ import annotations

import pytest

from suites.benchmarks import bench_boundary


def test_every_shape_gets_a_profile_of_the_chain_with_its_crossings(capsys):
    results = bench_boundary.measure(((1, 8), (1, 4, 4, 4)), repeat=2, profiles=1)
    printed = capsys.readouterr().out.splitlines()
    assert [shape for shape, _ in results] == [(1, 8), (1, 4, 4, 4)]
    for (shape, profile), line in zip(results, printed, strict=True):
        assert profile.boundaries == 2 * bench_boundary.gate.CHAIN  # every engine's input and every relu's
        assert len(profile.segments) == 2 * bench_boundary.gate.CHAIN
        assert profile.per_boundary_s > 0 and profile.engine_s > 0 and profile.torch_s > 0
        assert line.lstrip().startswith("x".join(map(str, shape))) and f"{profile.boundaries} values" in line


@pytest.mark.parametrize("text", ["1x0x3", "64 56", "big", ""])
def test_a_shape_that_is_not_one_is_named(text, capsys):
    with pytest.raises(SystemExit):
        bench_boundary.main(["--shapes", text])
    assert f"{text!r} is not a shape" in capsys.readouterr().err


def test_threads_sets_the_count_for_the_run_and_puts_the_caller_s_back(capsys):
    import torch

    before = torch.get_num_threads()
    bench_boundary.main(["--shapes", "1x8", "--repeat", "2", "--profiles", "1", "--threads", "1"])
    assert "torch threads: 1," in capsys.readouterr().out
    assert torch.get_num_threads() == before
