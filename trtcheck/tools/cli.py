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
model that does not load, bad settings, an unknown backend). Usage errors print one message naming the
problem and the fix, never a traceback.

Each command imports what it runs when it runs (the imports inside the functions below): the parser needs
no torch, so ``trtcheck --help`` answers at once instead of after torch's two-second import.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trtcheck
from trtcheck.atomic import atomic_write
from trtcheck.errors import TrtcheckError
from trtcheck.settings import PRECISIONS, SEGMENTATIONS, Settings

MODEL_HELP = (
    "what to check: a zoo name (resnet18), path/to/file.py:factory, package.module:factory, or a .pt2 file saved "
    "with torch.export.save"
)


def _settings(args: argparse.Namespace) -> Settings:
    from trtcheck.names import checked_settings  # deferred: resolving op names imports torch

    values: dict[str, Any] = {
        "min_block_size": args.min_block_size,
        "torch_executed_ops": args.torch_executed_ops,
        "torch_executed_modules": args.torch_executed_modules,
        "segmentation": args.segmentation,
        "require_full_compilation": args.require_full_compilation,
    }
    if args.precision is not None:
        values["precision"] = args.precision
    return checked_settings(Settings(**values))  # validated: bad values fail before the model is built


def _load(spec: str) -> Any:
    from trtcheck.tools.loading import load_model  # deferred: loading a model imports torch

    return load_model(spec)


def _graph_or_model(loaded: Any) -> Any:
    """What partition and compile take: the model, or an exported program lowered as it is."""
    if loaded.is_program:
        return trtcheck.lower(loaded.model_or_program, loaded.example_inputs, loaded.example_kwargs)
    return loaded.model_or_program


def _partition(args: argparse.Namespace) -> int:
    from trtcheck.tools.graph_html import partition_html  # deferred: it imports torch

    settings = _settings(args)
    loaded = _load(args.model)
    result = trtcheck.partition(_graph_or_model(loaded), loaded.example_inputs, settings, example_kwargs=loaded.example_kwargs)
    print(result if args.graphs else result.summary())
    print(result.explain() if args.explain else result.explain_summary())
    if args.html:
        path = Path(args.html)
        try:
            atomic_write(path, partition_html(result, f"trtcheck partition {loaded.name}"))
        except OSError as error:
            raise TrtcheckError(f"cannot write {path}: {error.strerror or error}; pass --html with a writable path") from None
        print(f"wrote {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    settings = _settings(args)
    loaded = _load(args.model)
    lowered = _graph_or_model(loaded) if loaded.is_program else None
    try:
        result = trtcheck.verify(
            loaded.eager_model(),
            loaded.example_inputs,
            settings,
            backend=args.backend,
            num_inputs=args.num_inputs,
            inputs=loaded.input_sets,
            example_kwargs=loaded.example_kwargs,
            allow_fallbacks=args.allow_fallbacks,
            lowered=lowered,
            seed=args.seed,
            report_dir=args.report_dir,
            name=loaded.name,
        )
    except trtcheck.VerificationError as failure:
        print(failure.report)
        return 1
    except trtcheck.NondeterministicModelError as failure:
        print(f"trtcheck verification of {loaded.name}: FAILED\n  {failure}")
        return 1
    print(result)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """One MODEL: a row per partitioner. No MODEL: the zoo and/or random graphs, with the tallies."""
    from trtcheck.build.convert import flat_inputs  # deferred: it imports torch
    from trtcheck.names import resolve_modules  # deferred: it imports torch
    from trtcheck.tools import compare  # deferred: it imports torch

    partitioners = [name for name in (args.partitioners or ",".join(compare.PARTITIONERS)).split(",") if name]
    unknown = [name for name in partitioners if name not in compare.PARTITIONERS]
    if unknown:
        raise TrtcheckError(f"unknown partitioners {unknown}; pass --partitioners with some of: {', '.join(compare.PARTITIONERS)}")
    if args.model is None:
        if args.zoo is None and not args.random:
            raise TrtcheckError("nothing to compare: give a MODEL, or --zoo [PRESET ...] and/or --random N")
        models = [pattern.strip() for pattern in args.models.split(",") if pattern.strip()]
        return compare.compare_many(args.zoo, models, args.random, args.seed, partitioners, args.quiet)
    settings = _settings(args)
    loaded = _load(args.model)
    eager = None if loaded.is_program else loaded.model_or_program
    graph_module = _graph_or_model(loaded) if loaded.is_program else trtcheck.lower(eager, loaded.example_inputs, loaded.example_kwargs)
    flat = flat_inputs(graph_module, loaded.example_inputs, loaded.example_kwargs)
    forced = resolve_modules(settings.torch_executed_modules, graph_module.graph, eager)
    rows = compare.compare(graph_module, flat, settings, name=loaded.name, partitioners=partitioners, forced_modules=forced)
    print(compare.format_rows(rows))
    for note in sorted({row.note for row in rows if row.note}):
        print(f"note: {note}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from trtcheck import report  # deferred: reading runs imports torch and matplotlib

    runs = report.load_runs(args.runs)
    baseline = report.load_run(args.baseline) if args.baseline else None
    threshold = report.DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    result = report.write_report(runs, args.out, baseline, threshold, args.allow_cross_machine)
    for warning in result.warnings:
        print(f"trtcheck: warning: {warning}", file=sys.stderr)
    for regression in result.regressions:
        print(f"REGRESSION {regression.describe()}")
    print(f"wrote {result.markdown} and {result.html}")
    return 1 if args.fail_on_regression and result.regressions else 0


def _settings_parser() -> argparse.ArgumentParser:
    """The ``Settings`` options ``partition``, ``verify`` and ``compare`` share."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("settings (trtcheck.Settings)")
    group.add_argument("--min-block-size", type=int, default=Settings.min_block_size, metavar="N")
    group.add_argument("--torch-executed-ops", nargs="*", default=[], metavar="OP", help="e.g. aten::relu aten.add.Tensor")
    group.add_argument("--torch-executed-modules", nargs="*", default=[], metavar="MODULE", help="class names or paths, e.g. layer1.0")
    group.add_argument("--segmentation", choices=SEGMENTATIONS, default=Settings.segmentation)
    group.add_argument("--require-full-compilation", action="store_true")
    group.add_argument("--precision", choices=PRECISIONS, default=None, help="TensorRT builder precision (default fp32)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trtcheck", description=(trtcheck.__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trtcheck {trtcheck.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    settings = _settings_parser()

    part = commands.add_parser("partition", parents=[settings], help="partition a model and print its segments")
    part.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    part.add_argument("--graphs", action="store_true", help="print every segment's graph (the seed's format)")
    part.add_argument("--explain", action="store_true", help="print where each node runs and why, after the summary")
    part.add_argument("--html", metavar="FILE", help="write a self-contained HTML page drawing the partitioned graph")
    part.set_defaults(run=_partition)

    ver = commands.add_parser(
        "verify", parents=[settings], help="compile a model and check it against eager PyTorch (exit 1 on failure)"
    )
    ver.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    ver.add_argument("--backend", default="auto", help="onnxruntime, tensorrt, or auto (TensorRT when present)")
    ver.add_argument("--allow-fallbacks", action="store_true", help="accept TensorRT segments that fell back to PyTorch")
    ver.add_argument("--num-inputs", type=int, default=3, metavar="N", help="input sets: the example, then N-1 random ones")
    ver.add_argument("--seed", type=int, default=0, help="seed of the random input sets")
    ver.add_argument("--report-dir", metavar="DIR", help="write a standalone repro here when verification fails")
    ver.set_defaults(run=_verify)

    cmp = commands.add_parser(
        "compare", parents=[settings], help="partition one graph with every partitioner at hand: segments, engines, bytes, time"
    )
    cmp.add_argument("model", metavar="MODEL", nargs="?", help=MODEL_HELP + " (or none, with --zoo/--random)")
    cmp.add_argument("--partitioners", default=None, metavar="NAMES", help=(
        f"comma separated (default: all): trtcheck's segmentations ({', '.join(SEGMENTATIONS)}), torch.fx's "
        "capability_based and splitter_base, and torch_tensorrt where it is installed"
    ))
    cmp.add_argument("--zoo", nargs="*", metavar="PRESET", default=None,
                     help="without MODEL: every zoo model under these presets (none given: the default presets)")
    cmp.add_argument("--models", default="*", help="with --zoo: zoo names or globs, comma separated (default: all)")
    cmp.add_argument("--random", type=int, default=0, metavar="N", help="without MODEL: also N random graphs")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the first random graph")
    cmp.add_argument("--quiet", action="store_true", help="print the tallies only, not a line per graph")
    cmp.set_defaults(run=_compare)

    rep = commands.add_parser("report", help="Markdown/HTML report and plots from pytest-benchmark JSON files")
    rep.add_argument("runs", nargs="+", metavar="RUN.json", help="pytest --benchmark-json files; the latest by datetime is reported")
    rep.add_argument("--out", required=True, metavar="DIR", help="directory for report.md, report.html and the plots")
    rep.add_argument("--baseline", metavar="FILE", help="compare against this run (default: the previous run among RUN.json)")
    rep.add_argument("--threshold", type=float, default=None,
                     help="flag a stitched median slower by more than this fraction (default: trtcheck.report.DEFAULT_THRESHOLD)")
    rep.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any regression is flagged")
    rep.add_argument("--allow-cross-machine", action="store_true", help="compare against a baseline from another machine")
    rep.set_defaults(run=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TrtcheckError as error:
        print(f"trtcheck: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
