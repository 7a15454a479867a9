"""Where ``verify``'s time goes on torchvision models: its phases by cProfile's cumulative times, against one eager
call (``python -m suites.corpus.verify_time resnet50 vit_b_16``; the figures: docs/performance.md, "The corpus
sweep")."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch
import torchvision

import trtcheck
from suites.benchmarks.bench_quantized import median_call

PHASES = {
    "both lowerings": "trtcheck/compiler/front.py:41(front)",
    "the determinism check's lowering": "determinism.py:41(determinism_violations)",
    "eager twice": "determinism.py:70(check_eager_is_deterministic)",
    "compiled twice": "determinism.py:102(check_compiled_is_deterministic)",
}


def measure(name: str) -> str:
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(1, 3, 224, 224) if name.startswith("vit") else torch.randn(1, 3, 96, 96)
    eager = 1000 * median_call(model, (x,), 3)
    profiler, start = cProfile.Profile(), time.perf_counter()
    profiler.enable()
    report = trtcheck.verify(model, (x,), backend="onnxruntime", localize_budget=0)
    profiler.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    parts = {label: max((v[3] for k, v in stats.items() if key in f"{k[0]}:{k[1]}({k[2]})"), default=0.0)
             for label, key in PHASES.items()}
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return (f"{name}: {params:.0f}M params, eager {eager:.1f} ms, verify {total:.1f} s ({total * 1000 / eager:.0f} eager "
            "calls); " + "; ".join(f"{k} {v:.1f} s" for k, v in parts.items()) + f"; compile phases {report.compile_times}")


if __name__ == "__main__":
    for model_name in sys.argv[1:]:
        print(measure(model_name), flush=True)
