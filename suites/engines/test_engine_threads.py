"""ONNX Runtime engines share the machine: thread counts and spinning as decided in issue 10 (no timing here).

The decision and its measurements are in ``OnnxRuntimeEngine``'s docstring; timings belong in
``suites/benchmarks/bench_segments.py``. These tests read the options back from each engine's session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from onnx import helper

import trtcheck
from trtcheck.engines import OnnxRuntimeEngine, TensorSpec, build_engine
from trtcheck.engines.onnxruntime import SPIN_POLICIES, default_threads, session_options

X = TensorSpec("x", (2, 3), torch.float32)
Y = TensorSpec("y", (2, 3), torch.float32)


@pytest.fixture
def relu_model(make_model):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y])


@pytest.fixture
def torch_threads():
    """Restore PyTorch's intra-op thread count after a test changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def entry(engine: OnnxRuntimeEngine, key: str) -> str | None:
    options = engine.session.get_session_options()
    try:
        return options.get_session_config_entry(key)
    except Exception:  # noqa: BLE001 - ORT raises when the key was never set
        return None


def assert_no_idle_spinning(engine: OnnxRuntimeEngine) -> None:
    """The decided policy: worker threads never spin (``allow_spinning`` "0" for both pools)."""
    assert entry(engine, "session.intra_op.allow_spinning") == "0"
    assert entry(engine, "session.inter_op.allow_spinning") == "0"


def test_default_engine_session_has_torch_threads_capped_at_cores_and_never_spins(relu_model):
    engine = build_engine(relu_model, [X], [Y], backend="onnxruntime", engines_in_model=2)
    options = engine.session.get_session_options()
    assert options.intra_op_num_threads == min(torch.get_num_threads(), cores()) == default_threads()
    assert options.inter_op_num_threads == 1
    assert options.use_per_session_threads
    assert_no_idle_spinning(engine)
    assert_no_idle_spinning(OnnxRuntimeEngine(relu_model, [X], [Y]))  # the constructor's default


def test_the_sole_engine_of_a_model_spins_only_while_it_runs(relu_model):
    """One engine has no other session to leave the cores to: it spins during a run, then stops."""
    engine = build_engine(relu_model, [X], [Y], backend="onnxruntime")
    assert entry(engine, "session.force_spinning_stop") == "1"
    assert entry(engine, "session.intra_op.allow_spinning") != "0"
    compiled = trtcheck.compile(Chain(), (torch.randn(4),), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    (sole,) = compiled.engines.values()
    assert entry(sole, "session.force_spinning_stop") == "1"


@pytest.mark.parametrize("threads", [1, "cores + 3"])
def test_engine_threads_follow_torch_at_build_time_never_above_the_cores(relu_model, torch_threads, threads):
    torch.set_num_threads(cores() + 3 if threads == "cores + 3" else threads)
    engine = OnnxRuntimeEngine(relu_model, [X], [Y])
    expected = cores() if threads == "cores + 3" else 1
    assert engine.session.get_session_options().intra_op_num_threads == expected


@pytest.mark.parametrize("spin", SPIN_POLICIES)
def test_explicit_options_are_used_as_given(relu_model, spin):
    engine = OnnxRuntimeEngine(relu_model, [X], [Y], options=session_options(threads=1, spin=spin))
    assert engine.session.get_session_options().intra_op_num_threads == 1
    expected = {"never": ("0", None), "stop_after_run": (None, "1"), "always": (None, None)}[spin]
    assert (entry(engine, "session.intra_op.allow_spinning"), entry(engine, "session.force_spinning_stop")) == expected
    x = torch.randn(2, 3)
    torch.testing.assert_close(engine(x)[0], torch.relu(x))


def test_unknown_spin_policy_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="spin must be one of stop_after_run, never, always, got 'sometimes'"):
        session_options(spin="sometimes")


def test_run_times_hook_records_the_time_inside_each_run_only_when_asked(relu_model):
    engine = OnnxRuntimeEngine(relu_model, [X], [Y])
    x = torch.randn(2, 3)
    assert engine.run_times is None
    engine(x)
    assert engine.run_times is None  # nothing recorded, nothing kept, unless a profiler asks
    engine.run_times = []
    out = engine(x)
    engine(x)
    assert len(engine.run_times) == 2 and all(isinstance(t, int) and t > 0 for t in engine.run_times)
    torch.testing.assert_close(out[0], torch.relu(x))


class Chain(torch.nn.Module):
    def forward(self, x):
        for _ in range(3):
            x = torch.sin(x) * 2.0
        return x


def test_every_engine_of_a_many_segment_model_gets_the_shared_machine_options():
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sin"])
    compiled = trtcheck.compile(Chain(), (torch.randn(4),), settings, backend="onnxruntime")
    assert len(compiled.engines) == 3
    for engine in compiled.engines.values():
        assert engine.session.get_session_options().intra_op_num_threads == default_threads()
        assert_no_idle_spinning(engine)


@pytest.mark.slow
def test_engines_work_in_a_process_that_configured_global_thread_pools():
    """After ``onnxruntime.set_global_thread_pool_sizes`` every session must use the global pools."""
    script = textwrap.dedent(
        """
        import onnxruntime as ort, torch
        ort.set_global_thread_pool_sizes(1, 1)
        ort.set_default_logger_severity(3)
        from onnx import helper
        from trtcheck.engines import OnnxRuntimeEngine, TensorSpec
        x, y = TensorSpec("x", (2, 3), torch.float32), TensorSpec("y", (2, 3), torch.float32)
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", 1, [2, 3])], [helper.make_tensor_value_info("y", 1, [2, 3])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        for _ in range(2):
            engine = OnnxRuntimeEngine(model, [x], [y])
            t = torch.randn(2, 3)
            assert torch.equal(engine(t)[0], torch.relu(t))
            assert not engine.session.get_session_options().use_per_session_threads
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")
