"""The zoo in fp16 and bf16: which models verify, before and after the float64-referenced check, and the float32
sets ``trtcheck precision`` finds for those that do not.

    python -m suites.benchmarks.zoo_precision [--models 'resnet*,hf_*'] [--precisions fp16,bf16] [--budget 120]

Per model and precision, one ``verify`` with ``Settings(min_block_size=1, precision=...)`` on ONNX Runtime's
emulation. "before": every output within the fixed tolerances of its dtype (what ``verify`` judged by before
issue 24: a float32 model's fp16 engine against float32's 1.3e-6/1e-5); "after": ``verify``'s verdict, against
eager at that precision and float64. A model failing after is searched (``search_fp32_nodes``, ``--budget`` seconds)
and listed with its reason: the overflow origins eager's activations name, and the float32 set found. Prints a
line per model, then the counts.
"""

from __future__ import annotations

import argparse
import sys
import time

import trtcheck
import trtcheck_zoo
from trtcheck.verification.fp32_search import search_fp32_nodes


def _within_fixed_tolerances(report: trtcheck.VerificationReport) -> bool:
    """Every output of every input set inside its dtype's fixed tolerances, and no other violation."""
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    inside = all(o.min_atol_to_pass <= o.atol and not o.nan_mismatch and not o.inf_mismatch for o in outputs)
    return inside and not report.violations and all(c.structure_error is None for c in report.comparisons)


def _verify(name: str, precision: str) -> tuple[bool, bool, str, trtcheck.VerificationReport | None]:
    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    options = {"inputs": entry.input_sets()} if entry.input_sets is not None else {}
    if entry.dynamic_shapes is not None:
        options["dynamic_shapes"] = entry.dynamic_shapes
    settings = trtcheck.Settings(min_block_size=1, precision=precision)
    try:
        report = trtcheck.verify(model, inputs, settings, backend="onnxruntime", localize_budget=0, **options)
        return _within_fixed_tolerances(report), True, "", report
    except trtcheck.VerificationError as failure:
        report = failure.report
        lines = [line.strip() for line in str(report).splitlines() if line.strip().startswith(("FAIL out", "FAIL ", "fallback:"))]
        return _within_fixed_tolerances(report), False, (lines[0] if lines else str(report).splitlines()[0])[:300], report
    except (trtcheck.TrtcheckError, RuntimeError) as error:
        return False, False, f"error: {type(error).__name__}: {str(error).splitlines()[0][:200]}", None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="*", help="zoo names or globs, comma separated")
    parser.add_argument("--precisions", default="fp16,bf16")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of search per failing model")
    args = parser.parse_args(argv)
    names = list(dict.fromkeys(name for glob in args.models.split(",") if glob.strip() for name in trtcheck_zoo.names(glob.strip())))
    counts: dict[str, dict[str, int]] = {}
    for precision in args.precisions.split(","):
        tally = counts.setdefault(precision, {"models": 0, "before": 0, "after": 0, "fp32 set found": 0})
        for name in names:
            start = time.perf_counter()
            before, after, why, report = _verify(name, precision)
            tally["models"] += 1
            tally["before"] += before
            tally["after"] += after
            line = f"{precision} {name}: before {'PASS' if before else 'FAIL'}, after {'PASS' if after else 'FAIL'}"
            if not after and report is not None:
                origins = [f.node for f in report.range_findings if f.kind == "overflow" and f.origin]
                entry = trtcheck_zoo.get(name)
                model, inputs = entry.build()
                found = search_fp32_nodes(
                    model, inputs, precision, trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                    inputs=entry.input_sets() if entry.input_sets is not None else None, budget=args.budget, timed=False,
                    name=name,
                )
                tally["fp32 set found"] += found.fp32_nodes is not None
                line += f"; overflow origins {origins}; fp32 set {found.fp32_nodes} ({len(found.trials)} trials); why: {why}"
            print(f"{line} [{time.perf_counter() - start:.0f} s]", flush=True)
    for precision, tally in counts.items():
        print(f"{precision}: {tally['models']} models; within fixed tolerances (before) {tally['before']}; verified "
              f"against float64 (after) {tally['after']}; float32 set found for {tally['fp32 set found']} of the "
              f"{tally['models'] - tally['after']} failing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
