"""PyTorch's thread count while a compiled module runs (``compile(torch_threads=...)``, issue 10).

What is checked is the count each ATen op run in PyTorch sees (recorded by a dispatch mode during the
call) and the caller's count after the call. Whether one thread is faster is a benchmark's question
(``suites/benchmarks/bench_segments.py``), not a test's.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import trtcheck
from trtcheck.errors import EngineRuntimeError, SettingsError
from trtcheck.runtime.stitch import EngineModule
from trtcheck.runtime.threads import auto_torch_threads

CALLER_THREADS = 2  # the caller's own count in these tests: one thread inside a call must be told apart from it


@pytest.fixture(autouse=True)
def caller_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(CALLER_THREADS)
    yield
    torch.set_num_threads(before)


class ThreadsSeen(TorchDispatchMode):
    """Records ``torch.get_num_threads()`` at every ATen op dispatched while active, by op name."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.setdefault(func.overloadpacket.__name__, set()).add(torch.get_num_threads())
        return func(*args, **(kwargs or {}))


def threads_seen(module, *inputs) -> dict[str, set[int]]:
    with ThreadsSeen() as mode:
        module(*inputs)
    return mode.seen


class ConvReluConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


class LinearRelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.linear(x * 2.0)) + 1.0


IMAGE = (torch.randn(1, 3, 16, 16),)
ROWS = (torch.randn(4, 16),)
RELU_IN_TORCH = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"])


def test_memory_bound_torch_segments_run_on_one_thread_between_engines():
    compiled = trtcheck.compile(ConvReluConv().eval(), IMAGE, RELU_IN_TORCH, backend="onnxruntime")
    assert len(compiled.engines) == 2 and compiled.torch_threads == 1
    seen = threads_seen(compiled, *IMAGE)
    assert seen["relu"] == {1}
    assert torch.get_num_threads() == CALLER_THREADS  # restored after the call


def test_a_compute_bound_op_in_pytorch_keeps_the_callers_threads():
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::addmm"])
    compiled = trtcheck.compile(LinearRelu().eval(), ROWS, settings, backend="onnxruntime")
    assert compiled.engines and compiled.torch_threads is None
    seen = threads_seen(compiled, *ROWS)
    assert seen["addmm"] == {CALLER_THREADS}


def test_without_engines_nothing_changes():
    ops = ["aten::mul", "aten::addmm", "aten::relu", "aten::add", "aten::permute"]
    everything = trtcheck.Settings(min_block_size=1, torch_executed_ops=ops)
    compiled = trtcheck.compile(LinearRelu().eval(), ROWS, everything, backend="onnxruntime")
    assert not compiled.engines
    assert compiled.torch_threads is None
    assert threads_seen(compiled, *ROWS)["relu"] == {CALLER_THREADS}


@pytest.mark.parametrize("count", [None, 1, 3])
def test_an_explicit_count_or_none_is_what_runs(count):
    compiled = trtcheck.compile(ConvReluConv().eval(), IMAGE, RELU_IN_TORCH, backend="onnxruntime", torch_threads=count)
    assert compiled.torch_threads == count
    assert threads_seen(compiled, *IMAGE)["relu"] == {CALLER_THREADS if count is None else count}
    assert torch.get_num_threads() == CALLER_THREADS


def test_the_count_is_restored_when_a_call_fails():
    compiled = trtcheck.compile(ConvReluConv().eval(), IMAGE, RELU_IN_TORCH, backend="onnxruntime")
    module = next(m for m in compiled.graph_module.modules() if isinstance(m, EngineModule))

    def broken(*tensors):
        raise RuntimeError("engine lost")

    module.engine = type("Broken", (), {"__call__": staticmethod(broken), "backend": "onnxruntime", "node_origins": {}})()
    with pytest.raises(EngineRuntimeError, match="engine lost"):
        compiled(*IMAGE)
    assert torch.get_num_threads() == CALLER_THREADS


def test_profile_runs_with_the_modules_count():
    compiled = trtcheck.compile(ConvReluConv().eval(), IMAGE, RELU_IN_TORCH, backend="onnxruntime")
    with ThreadsSeen() as mode:
        trtcheck.profile(compiled, *IMAGE, warmup=0, repeat=1)
    assert mode.seen["relu"] == {1}
    assert torch.get_num_threads() == CALLER_THREADS


class Branches(torch.nn.Module):
    """An engine before a cond whose true branch multiplies by a weight (``mm``) and whose false branch is
    elementwise: what PyTorch runs inside branches counts like what it runs outside."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        h = torch.tanh(x * 2.0 + 1.0)
        return torch.cond(h.sum() > 0, lambda h: (h @ self.weight).sigmoid(), lambda h: h.sigmoid() * 3.0, (h,))


@pytest.mark.parametrize("forced, expected", [("aten::mm", None), ("aten::sigmoid", 1)])
def test_ops_inside_control_flow_branches_count(forced, expected):
    x = torch.randn(4, 8)
    with torch.no_grad():
        settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=[forced])
        compiled = trtcheck.compile(Branches(), (x,), settings, backend="onnxruntime")
    assert compiled.engines  # the parent's tanh(x * 2 + 1) is an engine
    assert auto_torch_threads(compiled.graph_module) == expected == compiled.torch_threads


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "fast", "2"])
def test_a_bad_count_is_refused_before_any_work(bad):
    class Unexportable(torch.nn.Module):
        def forward(self, x):
            return x.numpy()  # would fail in torch.export: the refusal must come first

    with pytest.raises(SettingsError, match=r"torch_threads must be 'auto'.*None.*positive int, got"):
        trtcheck.compile(Unexportable(), ROWS, torch_threads=bad)
