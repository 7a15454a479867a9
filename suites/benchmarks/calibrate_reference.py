"""Calibrate ``judge.REFERENCE_MULTIPLE``: the largest float64 ratio of correct conversions, and the smallest
ratio of a planted wrong converter.

    python -m suites.benchmarks.calibrate_reference [--models 'resnet*'] [--random 200] [--presets min_block_size_1,...]

For every selected zoo model under the selected presets, and for ``--random`` seeded random graphs (float32
and float16), ``verify`` runs with the defaults; every output that the fixed tolerances failed was judged
against float64, and its ratio (compiled error / eager error, both against float64) is collected. A correct
conversion must stay under the multiple; then the same models are verified with ``aten.convolution``,
``aten.addmm`` and ``aten.mm`` off by 1e-3 relative (through the public registry API), whose ratios must stay
above it. Prints the largest correct ratio, the smallest planted one, and where each came from.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys

import torch

import trtcheck
import trtcheck_zoo
from trtcheck import conversion
from trtcheck.presets import resolve_presets
from trtcheck.testing.random_graphs import build_graph, random_recipe, supports_all_but

PLANTED = (torch.ops.aten.convolution.default, torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
OFF_BY = 1e-3


def _ratios(report: trtcheck.VerificationReport) -> list[float]:
    return [o.reference_ratio for c in report.comparisons for o in c.outputs if o.reference_ratio is not None]


def _verify(model, example, settings, **options) -> tuple[bool, list[float], str]:
    try:  # localize_budget=0: where a mismatch comes from is not what is calibrated
        report = trtcheck.verify(model, example, settings, backend="onnxruntime", localize_budget=0, **options)
        return True, _ratios(report), ""
    except trtcheck.VerificationError as failure:
        return False, _ratios(failure.report), str(failure.report).splitlines()[0]
    except (trtcheck.TrtcheckError, RuntimeError) as error:  # a preset that does not apply, a model that cannot run
        return True, [], f"skipped: {type(error).__name__}"


def _planted():
    """Every ``PLANTED`` converter, scaled by ``1 + OFF_BY`` at its output: a small, systematic conversion error."""
    snapshot = conversion.Snapshot()
    snapshot.__enter__()
    for op in PLANTED:
        original = conversion.get(op)

        def wrong(ctx, node, fn=original.fn):
            dtype = node.meta["val"].dtype
            return ctx.add("Mul", [fn(ctx, node), ctx.constant(1 + OFF_BY, dtype)])

        conversion.register(op, validator=original.validator, override=True)(wrong)
    return snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="*", help="zoo names or globs, comma separated")
    parser.add_argument("--presets", default="min_block_size_1,min_block_size_5")
    parser.add_argument("--random", type=int, default=100, help="random graphs (float32 and float16 alternately)")
    args = parser.parse_args(argv)
    patterns = [p.strip() for p in args.models.split(",") if p.strip()]
    names = [n for n in trtcheck_zoo.names() if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    presets = resolve_presets(args.presets.split(","))
    correct: list[tuple[float, str]] = []
    planted: list[tuple[float, str]] = []
    failures: list[str] = []
    for planting in (False, True):
        snapshot = _planted() if planting else None
        try:
            for name in names:
                entry = trtcheck_zoo.get(name)
                for preset in presets:
                    settings = preset.settings_for(entry.fallback_module)
                    if settings is None:
                        continue
                    model, inputs = entry.build()
                    options = {"inputs": entry.input_sets()} if entry.input_sets is not None else {}
                    if entry.dynamic_shapes is not None:
                        options["dynamic_shapes"] = entry.dynamic_shapes
                    passed, ratios, why = _verify(model, inputs, settings, **options)
                    where = f"{name}/{preset.name}"
                    (planted if planting else correct).extend((r, where) for r in ratios)
                    if not passed and not planting:
                        failures.append(f"{where}: {why}")
                    print(f"{'planted' if planting else 'correct'} {where}: {'PASS' if passed else 'FAIL'} "
                          f"ratios {[f'{r:.3g}' for r in ratios]} {why}", flush=True)
            for seed in range(args.random if not planting else 0):
                dtype = torch.float32 if seed % 2 == 0 else torch.float16
                graph = build_graph(random_recipe(12, 0.1, seed), seed=seed, dtype=dtype)
                passed, ratios, why = _verify(graph.graph_module, graph.example_inputs, trtcheck.Settings(min_block_size=1),
                                              support=supports_all_but())
                correct.extend((r, f"random-{seed}-{dtype}") for r in ratios)
                if not passed:
                    failures.append(f"random-{seed}-{dtype}: {why}")
        finally:
            if snapshot is not None:
                snapshot.__exit__(None, None, None)
    worst = max(correct, default=(0.0, "-"))
    best_planted = min((p for p in planted if math.isfinite(p[0])), default=(math.inf, "-"))
    print(f"\ncorrect conversions: {len(correct)} outputs judged against float64, largest ratio {worst[0]:.3g} ({worst[1]})")
    print(f"planted converters (x{1 + OFF_BY:g}): {len(planted)} outputs judged, smallest ratio {best_planted[0]:.3g} ({best_planted[1]})")
    print(f"REFERENCE_MULTIPLE = {trtcheck.verification.judge.REFERENCE_MULTIPLE:g}")
    for failure in failures:
        print(f"FAILED (correct conversion): {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
