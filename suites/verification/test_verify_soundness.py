"""A PASS must mean something: each way ``verify`` once passed while testing nothing, or blamed the conversion
for what was not its fault, and the bad inputs and faults it must name clearly.

Every test here failed on the code before the fix (the closing note of the issue says how each was seen).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import trtcheck
import trtcheck_zoo as models
from trtcheck import conversion as converters

aten = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)
REPO = Path(__file__).resolve().parents[2]


class AddMul(nn.Module):
    def forward(self, x, y):
        return (x + y) * y - x


def _inputs():
    return (torch.randn(3, 4), torch.randn(3, 4))


@pytest.fixture
def broken_add_converter():
    """A converter for aten.add.Tensor that always fails: its segment falls back to PyTorch."""

    def convert(ctx, node):
        raise RuntimeError("this converter is broken on purpose")

    with converters.Snapshot():
        converters.register(aten.add.Tensor, override=True)(convert)
        yield


@pytest.mark.slow
def test_a_fallback_fails_verify_by_default_naming_the_segment_and_error(broken_add_converter):
    expected = r"(?s)\[fallback\].*segment @0.*broken on purpose.*allow_fallbacks=True"
    with pytest.raises(trtcheck.VerificationError, match=expected) as caught:
        trtcheck.verify(AddMul(), _inputs(), ONE, backend="onnxruntime")
    assert caught.value.report.partition.fallbacks


def test_allow_fallbacks_accepts_a_fallback_and_still_reports_it(broken_add_converter):
    report = trtcheck.verify(AddMul(), _inputs(), ONE, backend="onnxruntime", allow_fallbacks=True)
    assert report.passed and len(report.partition.fallbacks) == 1
    assert "broken on purpose" in str(report)


def test_determinism_is_checked_from_scratch_on_the_onnx_bytes(monkeypatch):
    import trtcheck.compiler.convert as convert_module

    calls = iter(range(1000))
    original = convert_module.segment_to_onnx

    def drifting(module, **options):  # a converter whose output depends on how often it ran: not deterministic
        model = original(module, **options)
        model.doc_string = f"conversion {next(calls)}"
        return model

    monkeypatch.setattr(convert_module, "segment_to_onnx", drifting)
    with pytest.raises(trtcheck.VerificationError, match=r"\[determinism\].*different ONNX bytes"):
        trtcheck.verify(AddMul(), _inputs(), ONE, backend="onnxruntime")


def test_the_determinism_check_serializes_no_weight(monkeypatch):
    """Comparing two conversions reads the weight-free models and the weights' memory (``SegmentOnnx.same_as``):
    serializing a model with its weights (seconds for vit_b_16, twice per verify) is what it avoids. Mapping's own
    ``in`` read (serialized) each model, so this failed before ``OnnxModels.__contains__`` (issue 25)."""
    import trtcheck.compiler.convert as convert_module

    def refused(self):
        raise AssertionError("serialized a model with its weights")

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))  # 16 KiB weights: held by reference
    monkeypatch.setattr(convert_module.SegmentOnnx, "serialized", refused)
    report = trtcheck.verify(model, (torch.randn(2, 64),), ONE, backend="onnxruntime")
    assert report.passed and report.partition.segments


_HASH_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys, torch, models, trtcheck
    from trtcheck.compiler.convert import convert
    for name in sys.argv[1:]:
        model, inputs = models.get(name).build()
        conversion = convert(model, inputs, trtcheck.Settings(min_block_size=1))
        digest = hashlib.sha256(repr(conversion.layout).encode())
        for index in sorted(conversion.onnx_models):
            digest.update(conversion.onnx_models[index])
        print(name, len(conversion.onnx_models), digest.hexdigest())
    """
)


@pytest.mark.slow
def test_two_processes_with_different_hash_seeds_convert_identically():
    names = ["seed_lgamma", "multi_output_ops", "module_fallback", "dict_output", "counter"]
    outputs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _HASH_SCRIPT, *names], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.split("\n"))
    assert outputs[0] == outputs[1]
    assert all(int(line.split()[1]) >= 1 for line in outputs[0] if line), outputs[0]  # engines were converted


class Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(torch.relu(self.linear(x)))


def test_nondeterministic_eager_is_named_as_such_not_blamed_on_the_conversion():
    model = Dropout().train()
    expected = r"(?s)Dropout is nondeterministic.*random ops: .*(bernoulli|dropout|rand).*model.eval\(\)"
    with pytest.raises(trtcheck.NondeterministicModelError, match=expected):
        trtcheck.verify(model, (torch.randn(4, 8),), ONE, backend="onnxruntime")


class Identity(nn.Module):
    def forward(self, x):
        return x


class Constant(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(6.0))

    def forward(self, x):
        return x, self.table


@pytest.mark.parametrize("model", [Identity(), Constant()], ids=["no_ops", "inputs_and_constants_out"])
def test_models_without_ops_just_work(model):
    x = torch.randn(2, 3)
    report = trtcheck.verify(model, (x,), ONE, backend="onnxruntime")
    assert report.passed and len(report.comparisons) == 4


class NeedsTwo(nn.Module):
    def forward(self, x, y):
        return torch.relu(x @ y)


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # Python control flow on a value: torch.export cannot capture it
            return x * 2
        return x


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: trtcheck.compile(lambda x: x, (torch.randn(2),)), trtcheck.LoweringError, r"nn.Module"),
        (
            lambda: trtcheck.compile(NeedsTwo(), (torch.randn(2, 3), torch.randn(2, 3))),
            trtcheck.LoweringError,
            r"(?s)example inputs do not fit NeedsTwo.*Fix:",
        ),
        (lambda: trtcheck.compile(NeedsTwo(), (torch.randn(2, 3),)), trtcheck.LoweringError, r"(?s)do not fit NeedsTwo.*missing"),
        (
            lambda: trtcheck.compile(DataDependent(), (torch.randn(3),), frontend="export"),  # "auto" compiles it (graph breaks)
            trtcheck.LoweringError,
            r"(?s)torch.export could not trace DataDependent.*Fix:",
        ),
        (lambda: trtcheck.compile(AddMul(), _inputs(), backend="onnxrt"), trtcheck.BackendError, r"did you mean 'onnxruntime'"),
        (lambda: trtcheck.compile(AddMul(), _inputs(), {"min_block_size": 1}), trtcheck.SettingsError, r"Settings\("),
        (lambda: trtcheck.compile(AddMul(), _inputs(), trtcheck.Settings(min_block_size=0)), trtcheck.SettingsError, r"min_block_size"),
        (lambda: trtcheck.compile(models.get("seed_lgamma").build()[0], models.get("seed_lgamma").build()[1],
                                  trtcheck.Settings(require_full_compilation=True)), trtcheck.PartitionError, r"lgamma"),
    ],
    ids=["not_a_module", "inputs_do_not_fit", "too_few_inputs", "not_exportable", "unknown_backend", "dict_settings",
         "min_block_size_0", "full_compilation_blocked"],
)
def test_bad_input_is_a_trtcheck_error_naming_the_fix(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((torch.randn(3, 4),), {}, r"takes \(x: Tensor\[3, 4\] float32 on cpu, y: Tensor\[3, 4\] float32 on cpu\)"),
        ((torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)), {}, r"called with 3 positional"),
        ((torch.randn(3, 4), torch.randn(3, 5)), {}, r"input 'y': expected Tensor\[3, 4\].*got Tensor\[3, 5\]"),
        ((torch.randn(3, 4), torch.randn(3, 4).double()), {}, r"input 'y': expected .*float32.*got .*float64"),
        ((torch.randn(3, 4), torch.empty(3, 4, device="meta")), {}, r"input 'y': .*got Tensor\[3, 4\] float32 on meta"),
        ((torch.randn(3, 4), 2.0), {}, r"input 'y': expected a Tensor, got float"),
    ],
    ids=["too_few", "too_many", "shape", "dtype", "device", "not_a_tensor"],
)
def test_calls_that_do_not_fit_are_refused_before_any_engine_runs(args, kwargs, message, monkeypatch):
    compiled = trtcheck.compile(AddMul(), _inputs(), ONE, backend="onnxruntime")
    ran = []
    for engine in compiled.engines.values():
        monkeypatch.setattr(type(engine), "__call__", lambda self, *a: ran.append(a))
    with pytest.raises(trtcheck.InputMismatchError, match=message):
        compiled(*args, **kwargs)
    assert ran == []


def test_an_engine_failing_at_run_time_names_its_segment():
    model, inputs = models.get("seed_lgamma").build()
    compiled = trtcheck.compile(model, inputs, ONE, backend="onnxruntime")
    module = compiled.graph_module.get_submodule("trt_engine_2")

    class LostDevice:  # stands in for an engine whose runtime fails (a lost GPU, an ORT kernel error)
        backend = module.engine.backend
        node_origins: dict[str, str] = {}  # what every Engine declares

        def __call__(self, *tensors):
            raise RuntimeError("device lost")

    module.engine = LostDevice()
    with pytest.raises(trtcheck.EngineRuntimeError, match=r"onnxruntime engine of TensorRT segment @2 failed.*device lost"):
        compiled(*inputs)


def test_a_compiled_module_called_from_two_threads_at_once_is_right():
    model, inputs = models.get("residual_unsupported").build()
    compiled = trtcheck.compile(model, inputs, ONE, backend="onnxruntime")
    sets = [tuple(torch.randn_like(x) for x in inputs) for _ in range(8)]
    with torch.no_grad():
        expected = [model(*s) for s in sets]
    results: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def work(worker):
        start.wait()
        for _ in range(10):
            results[worker].append([compiled(*s) for s in sets])

    threads = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(len(runs) == 10 for runs in results.values())
    for runs in results.values():
        for outputs in runs:
            for got, want in zip(outputs, expected):
                torch.testing.assert_close(got, want)


_RSS_SCRIPT = textwrap.dedent(
    """
    import gc, os, torch, trtcheck
    from torch import nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(16, 16)

        def forward(self, x):
            return torch.lgamma(torch.sigmoid(self.linear(x)) + 1) + x

    def rss():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    x = torch.randn(2, 16)
    def cycle(count):
        for _ in range(count):
            compiled = trtcheck.compile(Small(), (x,), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
            compiled(x)
            del compiled
        gc.collect()

    cycle(20)  # warm: torch.export's caches, ONNX Runtime's allocator arenas
    base = rss(); cycle(100); middle = rss(); cycle(100); end = rss()
    print(base, middle, end)
    """
)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads RSS from /proc (Linux)")
@pytest.mark.slow
def test_compiling_and_dropping_200_models_does_not_grow_memory_without_bound():
    """In a fresh interpreter: a test process's RSS also moves with what earlier tests freed or cached."""
    done = subprocess.run([sys.executable, "-c", _RSS_SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    base, middle, end = map(int, done.stdout.split()[-3:])
    # A leak of one compiled module (engines, ONNX bytes, graph) would be >= 100 kB per cycle: >= 10 MB per 100.
    assert end - middle < 8 * 2**20, (
        f"RSS grew {(end - middle) / 2**20:.1f} MiB over the last 100 compiles (first 100: {(middle - base) / 2**20:.1f})"
    )
