"""The ``trtcheck`` command: partition or verify a model from the shell, and report benchmark runs.

    trtcheck partition resnet18 --min-block-size 3 --torch-executed-ops aten::relu --explain --html r18.html
    trtcheck partition path/to/mine.py:build         # the user's own factory: () -> (model, example_inputs)
    trtcheck verify mypackage.models:build --backend onnxruntime
    trtcheck verify exported.pt2                     # a torch.export.save file, lowered as exported
    trtcheck compare resnet18 --min-block-size 3      # every partitioner on the same graph and support
    trtcheck compare --zoo --random 500              # the zoo under the default presets, 500 random graphs
    trtcheck report monday.json tuesday.json --out report/ --fail-on-regression

Exit codes, as ``polygraphy run``: 0 passed, 1 a check failed (``verify``: outputs differ, an invariant
broke, eager disagrees with itself; ``report --fail-on-regression``: a regression), 2 a usage error (a
target that does not load, bad settings, an unknown backend). Usage errors print one message naming the
problem and the fix, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

import trtcheck
from trtcheck import report
from trtcheck.targets import TARGET_FORMS, LoadedTarget, load_target


def _settings(args: argparse.Namespace) -> trtcheck.Settings:
    values: dict = {
        "min_block_size": args.min_block_size,
        "torch_executed_ops": args.torch_executed_ops,
        "torch_executed_modules": args.torch_executed_modules,
        "segmentation": args.segmentation,
        "require_full_compilation": args.require_full_compilation,
    }
    if getattr(args, "precision", None) is not None:
        values["precision"] = args.precision
    return trtcheck.Settings.coerce(trtcheck.Settings(**values))  # validated: bad values fail before the model is built


def _model(target: LoadedTarget) -> torch.nn.Module:
    """What partition and compile take: the model, or an exported program lowered as it is."""
    if target.is_program:
        return trtcheck.lower(target.model_or_program, target.example_inputs, target.example_kwargs)
    return target.model_or_program


def _partition(args: argparse.Namespace) -> int:
    settings = _settings(args)
    target = load_target(args.target)
    result = trtcheck.partition(_model(target), target.example_inputs, settings, example_kwargs=target.example_kwargs)
    print(result if args.graphs else result.summary())
    print(result.explain() if args.explain else result.explain_summary())
    if args.html:
        from trtcheck.atomic import atomic_write
        from trtcheck.partitioning.graph_html import partition_html

        path = Path(args.html)
        try:
            atomic_write(path, partition_html(result, f"trtcheck partition {target.name}"))
        except OSError as error:
            raise trtcheck.TrtcheckError(f"cannot write {path}: {error.strerror or error}; pass --html with a writable path") from None
        print(f"wrote {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    settings = _settings(args)
    target = load_target(args.target)
    lowered = _model(target) if target.is_program else None
    try:
        result = trtcheck.verify(
            target.eager_model(),
            target.example_inputs,
            settings,
            backend=args.backend,
            num_inputs=args.num_inputs,
            inputs=target.input_sets,
            example_kwargs=target.example_kwargs,
            allow_fallbacks=args.allow_fallbacks,
            lowered=lowered,
            seed=args.seed,
            report_dir=args.report_dir,
            name=target.name,
        )
    except trtcheck.VerificationError as failure:
        print(failure.report)
        return 1
    except trtcheck.NondeterministicModelError as failure:
        print(f"trtcheck verification of {target.name}: FAILED\n  {failure}")
        return 1
    print(result)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """One TARGET: a row per partitioner. No TARGET: the zoo and/or random graphs, with the tallies."""
    from trtcheck.partitioning import compare

    strategies = [name for name in args.strategies.split(",") if name]
    unknown = [name for name in strategies if name not in compare.STRATEGIES]
    if unknown:
        raise trtcheck.TrtcheckError(f"unknown strategies {unknown}; pass --strategies with some of: {', '.join(compare.STRATEGIES)}")
    if args.target is None:
        if args.zoo is None and not args.random:
            raise trtcheck.TrtcheckError("nothing to compare: give a TARGET, or --zoo [PRESET ...] and/or --random N")
        argv = ["--strategies", ",".join(strategies), "--seed", str(args.seed), "--random", str(args.random)]
        argv += ["--zoo", *args.zoo] if args.zoo is not None else []
        return compare.main(argv + (["--quiet"] if args.quiet else []))
    from trtcheck.compiler import _flat_inputs
    from trtcheck.settings import resolve_modules

    settings = _settings(args)
    target = load_target(args.target)
    eager = None if target.is_program else target.model_or_program
    graph_module = _model(target) if target.is_program else trtcheck.lower(eager, target.example_inputs, target.example_kwargs)
    flat = _flat_inputs(graph_module, target.example_inputs, target.example_kwargs)
    forced = resolve_modules(settings.torch_executed_modules, graph_module.graph, eager)
    rows = compare.compare(graph_module, flat, settings, name=target.name, strategies=strategies, forced_modules=forced)
    print(compare.format_rows(rows))
    for note in sorted({row.note for row in rows if row.note}):
        print(f"note: {note}")
    return 0


def _report(args: argparse.Namespace) -> int:
    runs = report.load_runs(args.runs)
    baseline = report.load_run(args.baseline) if args.baseline else None
    result = report.write_report(runs, args.out, baseline, args.threshold, args.allow_cross_machine)
    for warning in result.warnings:
        print(f"trtcheck: warning: {warning}", file=sys.stderr)
    for regression in result.regressions:
        print(f"REGRESSION {regression.describe()}")
    print(f"wrote {result.markdown} and {result.html}")
    return 1 if args.fail_on_regression and result.regressions else 0


def _settings_parser() -> argparse.ArgumentParser:
    """The ``Settings`` options ``partition`` and ``verify`` share."""
    import trtcheck.settings as settings_module
    from trtcheck.partitioning.segmentation import SEGMENTERS
    from trtcheck.settings import Settings

    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("settings (trtcheck.Settings)")
    group.add_argument("--min-block-size", type=int, default=Settings.min_block_size, metavar="N")
    group.add_argument("--torch-executed-ops", nargs="*", default=[], metavar="OP", help="e.g. aten::relu aten.add.Tensor")
    group.add_argument("--torch-executed-modules", nargs="*", default=[], metavar="MODULE", help="class names or paths, e.g. layer1.0")
    group.add_argument("--segmentation", choices=sorted(SEGMENTERS), default=Settings.segmentation)
    group.add_argument("--require-full-compilation", action="store_true")
    precisions = getattr(settings_module, "PRECISIONS", None)  # the TensorRT builder's settings, when present
    if precisions:
        group.add_argument("--precision", choices=precisions, default=None, help="TensorRT builder precision (default fp32)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trtcheck", description=trtcheck.__doc__)
    parser.add_argument("--version", action="version", version=f"trtcheck {trtcheck.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    settings = _settings_parser()
    target_help = f"what to check: {TARGET_FORMS}"

    part = commands.add_parser("partition", parents=[settings], help="partition a model and print its segments")
    part.add_argument("target", metavar="TARGET", help=target_help)
    part.add_argument("--graphs", action="store_true", help="print every segment's graph (the seed's format)")
    part.add_argument("--explain", action="store_true", help="print where each node runs and why, after the summary")
    part.add_argument("--html", metavar="FILE", help="write a self-contained HTML page drawing the partitioned graph")
    part.set_defaults(run=_partition)

    ver = commands.add_parser(
        "verify", parents=[settings], help="compile a model and check it against eager PyTorch (exit 1 on failure)"
    )
    ver.add_argument("target", metavar="TARGET", help=target_help)
    ver.add_argument("--backend", default="auto", help="onnxruntime, tensorrt, or auto (TensorRT when present)")
    ver.add_argument("--allow-fallbacks", action="store_true", help="accept TensorRT segments that fell back to PyTorch")
    ver.add_argument("--num-inputs", type=int, default=3, metavar="N", help="input sets: the example, then N-1 random ones")
    ver.add_argument("--seed", type=int, default=0, help="seed of the random input sets")
    ver.add_argument("--report-dir", metavar="DIR", help="write a standalone repro here when verification fails")
    ver.set_defaults(run=_verify)

    from trtcheck.partitioning.compare import STRATEGIES

    cmp = commands.add_parser(
        "compare", parents=[settings], help="partition one graph with every partitioner at hand: segments, engines, bytes, time"
    )
    cmp.add_argument("target", metavar="TARGET", nargs="?", help=target_help + " (or none, with --zoo/--random)")
    cmp.add_argument("--strategies", default=",".join(STRATEGIES), help="comma separated, of: " + ", ".join(STRATEGIES))
    cmp.add_argument("--zoo", nargs="*", metavar="PRESET", default=None,
                     help="without TARGET: every zoo model under these presets (none given: the default presets)")
    cmp.add_argument("--random", type=int, default=0, metavar="N", help="without TARGET: also N random graphs")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the first random graph")
    cmp.add_argument("--quiet", action="store_true", help="print the tallies only, not a line per graph")
    cmp.set_defaults(run=_compare)

    rep = commands.add_parser("report", help="Markdown/HTML report and plots from pytest-benchmark JSON files")
    rep.add_argument("runs", nargs="+", metavar="RUN.json", help="pytest --benchmark-json files; the latest by datetime is reported")
    rep.add_argument("--out", required=True, metavar="DIR", help="directory for report.md, report.html and the plots")
    rep.add_argument("--baseline", metavar="FILE", help="compare against this run (default: the previous run among RUN.json)")
    rep.add_argument("--threshold", type=float, default=report.DEFAULT_THRESHOLD,
                     help=f"flag a stitched median slower by more than this fraction (default {report.DEFAULT_THRESHOLD})")
    rep.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any regression is flagged")
    rep.add_argument("--allow-cross-machine", action="store_true", help="compare against a baseline from another machine")
    rep.set_defaults(run=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except trtcheck.TrtcheckError as error:
        print(f"trtcheck: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
