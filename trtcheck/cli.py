"""The ``trtcheck`` command: look at how a zoo model is partitioned, from the shell.

    trtcheck partition resnet18 --min-block-size 3 --torch-executed-ops aten::relu --explain
    trtcheck report monday.json tuesday.json --out report/ --fail-on-regression
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import trtcheck
from trtcheck import report


def _settings(args: argparse.Namespace) -> trtcheck.Settings:
    return trtcheck.Settings(
        min_block_size=args.min_block_size,
        torch_executed_ops=args.torch_executed_ops,
        torch_executed_modules=args.torch_executed_modules,
        segmentation=args.segmentation,
        require_full_compilation=args.require_full_compilation,
    )


def _partition(args: argparse.Namespace) -> int:
    import trtcheck_zoo as models

    model, inputs = models.get(args.model).build()
    result = trtcheck.partition(model, inputs, _settings(args))
    print(result if args.graphs else result.summary())
    if args.explain:
        print(result.explain())
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trtcheck", description=trtcheck.__doc__)
    parser.add_argument("--version", action="version", version=f"trtcheck {trtcheck.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    part = commands.add_parser("partition", help="partition a zoo model and print its segments")
    part.add_argument("model", help="a zoo model name (python -c 'import trtcheck_zoo; print(trtcheck_zoo.names())')")
    part.add_argument("--min-block-size", type=int, default=trtcheck.Settings.min_block_size)
    part.add_argument("--torch-executed-ops", nargs="*", default=[], metavar="OP")
    part.add_argument("--torch-executed-modules", nargs="*", default=[], metavar="MODULE")
    part.add_argument("--segmentation", choices=["dependency_aware", "naive"], default="dependency_aware")
    part.add_argument("--require-full-compilation", action="store_true")
    part.add_argument("--graphs", action="store_true", help="print every segment's graph (the seed's format)")
    part.add_argument("--explain", action="store_true", help="print where each node runs and why")
    part.set_defaults(run=_partition)
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
    except (trtcheck.TrtcheckError, KeyError) as error:
        print(f"trtcheck: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
