"""The zoo in fp16, bf16 and tf32: which models verify, by fixed tolerances and against float64, how far from float64
each is, and the float32 sets ``trtcheck precision`` and Torch-TensorRT's Autocast keep for those that do not.

    python -m suites.benchmarks.zoo_precision [--models 'resnet*,hf_*'] [--precisions fp16,bf16,tf32] [--budget 120]
        [--policies] [--json OUT.json]

Per model and precision, one ``verify`` with ``Settings(min_block_size=1, precision=...)`` on ONNX Runtime: "fixed":
every output within the fixed tolerances of its dtype (what ``verify`` judged by before issue 24: a float32 model's fp16
engine against float32's 1.3e-6/1e-5); "verdict": ``verify``'s, against eager at that precision and float64; "worst":
the largest ratio of an output's error against float64 to eager's own at that precision, and that output's error. A
model failing is searched (``search_fp32_nodes``, ``--budget`` seconds; 0: no search) and listed with its reason.

``--policies`` (fp16/bf16; needs issue 40's engines): for every model, besides the plain graph, the float32 set
``trtcheck precision`` finds (its node count, its verdict and worst ratio) and Torch-TensorRT's Autocast
(``Settings(autocast=Autocast(calibration=...))``, its 512 output threshold on eager's activations on the example: the
rule Torch-TensorRT applies with a calibration data loader): how many nodes each keeps in float32, and how close to
float64 each gets.

``tf32`` (needs issue 40's engines): ``Settings(tf32=True)`` compiled, its outputs compared with eager float32's by the
fixed float32 tolerances, and judged against float64 with eager under the same TF32 rounding as the yardstick
(``verification.reference.tf32_rounding``) by the rule ``verify`` applies to fp16 (4x eager's error + 1e-4), until ``verify`` itself
learns ``judged_precision``.

The same script measured the zoo before issue 40 (``PYTHONPATH=<a checkout of 4345836>``: its fp16 was a per-node
rounding of the float32 graph) and after (the mixed-precision graph): the report of issue 40 has both.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import time
from typing import Any

import onnx
import torch

import trtcheck
import trtcheck_zoo
from trtcheck.verification.fp32_search import search_fp32_nodes


def _within_fixed_tolerances(report: trtcheck.VerificationReport) -> bool:
    """Every output of every input set inside its dtype's fixed tolerances, and no other violation."""
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    inside = all(o.min_atol_to_pass <= o.atol and not o.nan_mismatch and not o.inf_mismatch for o in outputs)
    return inside and not report.violations and all(c.structure_error is None for c in report.comparisons)


def _worst(comparisons: list[Any]) -> tuple[float | None, float | None]:
    """The largest float64 ratio over every output and input set, and that output's error against float64."""
    judged = [o for c in comparisons for o in c.outputs if o.reference_ratio is not None]
    if not judged:
        return None, None
    worst = max(judged, key=lambda o: o.reference_ratio)
    return worst.reference_ratio, worst.reference_error


@dataclasses.dataclass
class Run:
    name: str
    precision: str
    fixed: bool = False
    verdict: bool = False
    why: str = ""
    ratio: float | None = None
    error: float | None = None
    seconds: float = 0.0
    fp32_nodes: int | None = None  # fx nodes kept in float32 (policies)
    label: str = ""

    def line(self) -> str:
        worst = "" if self.ratio is None else f", worst {self.ratio:.3g}x eager (error {self.error:.3g})"
        kept = "" if self.fp32_nodes is None else f", {self.fp32_nodes} node(s) in float32"
        label = f" [{self.label}]" if self.label else ""
        return (f"{self.precision} {self.name}{label}: fixed {'PASS' if self.fixed else 'FAIL'}, verdict "
                f"{'PASS' if self.verdict else 'FAIL'}{worst}{kept} [{self.seconds:.0f} s]" + (f"; why: {self.why}" if self.why else ""))


def _options(entry: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"inputs": entry.input_sets()} if entry.input_sets is not None else {}
    if entry.dynamic_shapes is not None:
        options["dynamic_shapes"] = entry.dynamic_shapes
    return options


def _verify(name: str, settings: trtcheck.Settings, label: str = "", **extra: Any) -> tuple[Run, Any]:
    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    run = Run(name, settings.precision, label=label)
    start = time.perf_counter()
    report = None
    try:
        report = trtcheck.verify(model, inputs, settings, backend="onnxruntime", localize_budget=0, **_options(entry), **extra)
        run.verdict = True
    except trtcheck.VerificationError as failure:
        report = failure.report
        lines = [line.strip() for line in str(report).splitlines() if line.strip().startswith(("FAIL out", "FAIL ", "fallback:"))]
        run.why = (lines[0] if lines else str(report).splitlines()[0])[:300]
    except (trtcheck.TrtcheckError, RuntimeError) as error:
        run.why = f"error: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    if report is not None:
        run.fixed = _within_fixed_tolerances(report)
        run.ratio, run.error = _worst(report.comparisons)
    run.seconds = time.perf_counter() - start
    return run, report


def _tf32(name: str) -> Run:
    """``Settings(tf32=True)`` on ONNX Runtime (``emulate_tf32``), by ``verify`` itself (``judged_precision`` "tf32":
    against float64 with eager under TF32 rounding as the yardstick, and a model's state restored between the runs it
    compares), its outputs also checked against the fixed float32 tolerances. Before, this script judged TF32 by its
    own loop, which called eager and the compiled module one after the other on a stateful model (counter,
    ring_buffer) and so failed them."""
    run, _ = _verify(name, trtcheck.Settings(min_block_size=1, tf32=True))
    run.precision = "tf32"
    return run


def _calibration(name: str) -> tuple[dict[str, float], torch.fx.GraphModule]:
    """Eager's largest ``|value|`` of every node of the lowered graph on the zoo model's example (Torch-TensorRT's
    calibration data for its Autocast output threshold), and that lowered graph (``verify`` is given it: the names match)."""
    from trtcheck.lowering.export import lower, source_of
    from trtcheck.lowering.graph import flat_inputs
    from trtcheck.verification.inputs import cloned
    from trtcheck.verification.recording import record_eager

    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    source = source_of(model, inputs, None)
    lowered = lower(source.lowerable, source.example_args, source.example_kwargs or {})
    values = record_eager(lowered, flat_inputs(lowered, cloned(tuple(source.example_args)), cloned(dict(source.example_kwargs or {}))))
    found = {}
    for node, value in values.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            found[node.name] = float(value.detach().abs().float().max())
    return found, lowered


def _policies(name: str, precision: str, budget: float) -> list[Run]:
    """The plain graph, ``trtcheck precision``'s float32 set and Torch-TensorRT's Autocast rules, side by side."""
    from trtcheck.settings import Autocast

    runs = []
    plain, _ = _verify(name, trtcheck.Settings(min_block_size=1, precision=precision), "plain")
    plain.fp32_nodes = 0
    runs.append(plain)
    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    found = search_fp32_nodes(model, inputs, precision, trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                              inputs=entry.input_sets() if entry.input_sets is not None else None, budget=budget, timed=False,
                              name=name)
    if found.fp32_nodes:
        minimal, _ = _verify(name, trtcheck.Settings(min_block_size=1, precision=precision, fp32_nodes=found.fp32_nodes),
                             "trtcheck precision")
        minimal.fp32_nodes = len(found.fp32_nodes)
        runs.append(minimal)
    calibration, lowered = _calibration(name)
    policy = Autocast(calibration=calibration)
    settings = trtcheck.Settings(min_block_size=1, precision=precision, autocast=policy)
    autocast, _ = _verify(name, settings, "torch_tensorrt autocast", lowered=lowered)
    autocast.fp32_nodes = _autocast_kept(name, settings, lowered)
    runs.append(autocast)
    return runs


def _autocast_kept(name: str, settings: trtcheck.Settings, lowered: torch.fx.GraphModule) -> int:
    """How many fx nodes the Autocast policy keeps in float32 across the model's engines (their ONNX nodes' origins)."""
    from trtcheck.compiler.mixed_precision import to_mixed_precision
    from trtcheck.onnx_format.origins import onnx_origin
    from trtcheck.settings import Autocast

    entry = trtcheck_zoo.get(name)
    model, inputs = entry.build()
    compiled = trtcheck.compile(model, inputs, dataclasses.replace(settings, precision="fp32", autocast=None), backend="onnxruntime",
                                lowered=lowered)
    kept: set[str] = set()
    for index in compiled.conversion.onnx_models:
        graph = onnx.load_from_string(compiled.conversion.onnx_models[index])
        mixed = to_mixed_precision(graph, settings.precision, autocast=Autocast.of(settings.autocast))
        by_name = {node.name: node for node in graph.graph.node}
        kept |= {onnx_origin(by_name[node])[0] for node, why in mixed.kept.items() if why.startswith("Autocast") and node in by_name}
    return len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="*", help="zoo names or globs, comma separated")
    parser.add_argument("--precisions", default="fp16,bf16")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of search per failing model (0: no search)")
    parser.add_argument("--policies", action="store_true", help="compare trtcheck precision's set with Torch-TensorRT's Autocast")
    parser.add_argument("--json", help="also write every run as JSON here")
    args = parser.parse_args(argv)
    names = list(dict.fromkeys(name for glob in args.models.split(",") if glob.strip() for name in trtcheck_zoo.names(glob.strip())))
    runs: list[Run] = []
    for precision in args.precisions.split(","):
        for name in names:
            if precision == "tf32":
                found = [_tf32(name)]
            elif args.policies:
                found = _policies(name, precision, args.budget)
            else:
                run, report = _verify(name, trtcheck.Settings(min_block_size=1, precision=precision))
                if not run.verdict and report is not None and args.budget > 0:
                    origins = [f.node for f in report.range_findings if f.kind == "overflow" and f.origin]
                    entry = trtcheck_zoo.get(name)
                    model, inputs = entry.build()
                    search = search_fp32_nodes(
                        model, inputs, precision, trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                        inputs=entry.input_sets() if entry.input_sets is not None else None, budget=args.budget, timed=False,
                        name=name,
                    )
                    run.why = f"overflow origins {origins}; fp32 set {search.fp32_nodes} ({len(search.trials)} trials); {run.why}"
                found = [run]
            for run in found:
                print(run.line(), flush=True)
            runs += found
    for precision in args.precisions.split(","):
        mine = [r for r in runs if r.precision == precision and r.label in ("", "plain")]
        ratios = [r.ratio for r in mine if r.ratio is not None and math.isfinite(r.ratio)]
        print(f"{precision}: {len(mine)} models; within fixed tolerances {sum(r.fixed for r in mine)}; verified against float64 "
              f"{sum(r.verdict for r in mine)}; median worst ratio {sorted(ratios)[len(ratios) // 2] if ratios else float('nan'):.3g}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump([dataclasses.asdict(r) for r in runs], file, indent=1)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
