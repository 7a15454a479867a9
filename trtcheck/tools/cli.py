"""The ``trtcheck`` command: partition or verify a model from the shell, and report benchmark runs.

    trtcheck partition resnet18 --min-block-size 3 --torch-executed-ops aten::relu --explain --html r18.html
    trtcheck partition path/to/mine.py:build         # the user's own factory: () -> (model, example_inputs)
    trtcheck verify mypackage.models:build --backend onnxruntime
    trtcheck verify exported.pt2                     # a torch.export.save file, lowered as exported
    trtcheck reduce mine.py:build --out reduced/     # every wrong op, reduced to a repro of a few nodes
    trtcheck reduce repro_dir/                       # the same, from the repro folder a failing verify wrote
    trtcheck precision mine.py:build --precision fp16  # the nodes to keep in float32 for it to verify in fp16
    trtcheck compare resnet18 --min-block-size 3      # every partitioner on the same graph and support
    trtcheck compare --zoo --random 500              # the zoo under the default presets, 500 random graphs
    trtcheck report monday.json tuesday.json --out report/ --fail-on-regression

Exit codes, as ``polygraphy run``: 0 passed, 1 a check failed (``verify``: outputs differ, an invariant
broke, eager disagrees with itself; ``report --fail-on-regression``: a regression), 2 a usage error (a
model that does not load, bad settings, an unknown backend). Usage errors print one message naming the
problem and the fix, never a traceback: what torch logged while a failed export ran (its own tracebacks)
is kept on the error and printed with ``--verbose`` only.

Each command imports what it runs when it runs (the imports inside the functions below): the parser needs
no torch, so ``trtcheck --help`` answers at once instead of after torch's two-second import.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import trtcheck
from trtcheck.atomic import atomic_write
from trtcheck.errors import ExportRefusedError, ReproWriteWarning, TrtcheckError
from trtcheck.settings import AUTOCAST_POLICIES, PRECISIONS, SEGMENTATIONS, Settings

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
    if args.fp32_nodes:
        values["fp32_nodes"] = args.fp32_nodes
    if args.use_fp32_acc:
        values["use_fp32_acc"] = True
    if args.autocast is not None:
        values["autocast"] = args.autocast  # a policy name: Settings resolves it (trtcheck.settings.AUTOCAST_POLICIES)
    if args.tf32:
        values["tf32"] = True
    # validated: bad values (--use-fp32-acc at fp32) fail as a SettingsError, printed as one line, before the model is built
    return checked_settings(Settings(**values))


def _load(spec: str) -> Any:
    from trtcheck.tools.targets import load_model  # deferred: loading a model imports torch

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
    result = trtcheck.partition(_graph_or_model(loaded), loaded.example_inputs, settings, example_kwargs=loaded.example_kwargs,
                                frontend=args.frontend)
    if isinstance(result, list):  # torch.compile's graphs (frontend compile, or auto where export refused)
        if args.html:
            raise TrtcheckError(f"--html draws one partitioned graph; {loaded.name} is {len(result)} graphs torch.compile "
                                "captured between graph breaks. Drop --html (each graph's partition is printed)")
        for captured, graph_partition in result:
            ended = f"; ended by a graph break at {captured.ended_by}" if captured.ended_by else ""
            print(f"{captured.name}{ended}")
            print(graph_partition if args.graphs else graph_partition.summary())
            print(graph_partition.explain() if args.explain else graph_partition.explain_summary())
        return 0
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
        with _repro_warnings_in_our_words(), _still_working(f"verifying {loaded.name}"):
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
                frontend=args.frontend,
            )
    except trtcheck.VerificationError as failure:
        print(failure.report)
        return 1
    except trtcheck.NondeterministicModelError as failure:
        print(f"trtcheck verification of {loaded.name}: FAILED\n  {failure}")
        return 1
    print(result)
    return 0


def _reduce(args: argparse.Namespace) -> int:
    """Every independent culprit of a mismatch, each reduced to a repro folder: exit 1 when there is one."""
    from trtcheck.conversion import Snapshot  # deferred: it imports torch
    from trtcheck.verification.reduce import load_repro, reduce_model, register_recorded_converters  # deferred: torch

    with Snapshot():  # a repro folder's converters are registered for its reduction only
        if Path(args.model).is_dir():  # a repro folder verify wrote: its graph, inputs, settings and converters
            case = load_repro(args.model)
            model, inputs, settings, name, kwargs = case.model, case.example_inputs, case.settings, Path(args.model).resolve().name, None
            recorded = {"inputs": case.input_sets, "dynamic_shapes": case.dynamic_shapes, "rtol": case.rtol, "atol": case.atol}
            # the user's converters the failure used, as the folder's repro.py registers them: without them the
            # reduction checks trtcheck's own converters and finds nothing, so a repro folder reduces as it fails
            for line in register_recorded_converters(Path(args.model) / "converters.json"):
                print("converter:", line, flush=True)
        else:
            settings = _settings(args)
            loaded = _load(args.model)
            model, inputs, name, kwargs = loaded.model_or_program, loaded.example_inputs, loaded.name, loaded.example_kwargs
            recorded = {}
        out = Path(args.out or f"trtcheck-reduced-{name}")
        with _still_working(f"reducing {name}"):
            reduction = reduce_model(
                model, inputs, settings, backend=args.backend, num_inputs=args.num_inputs, seed=args.seed,
                example_kwargs=kwargs, out_dir=out, budget=args.budget or None, **recorded,
            )
    print(reduction)
    return 1 if reduction.failed else 0  # a mismatch no culprit explains (inside a branch, say) is no pass either


def _precision(args: argparse.Namespace) -> int:
    """The nodes to keep in float32 so that the model verifies at ``--precision``: exit 0 when a set is found (or
    none is needed), 1 when even every engine node in float32 fails."""
    from trtcheck.verification.fp32_search import search_fp32_nodes  # deferred: it imports torch

    if args.quant:
        return _quantizers(args)
    if args.max_loss is not None:
        raise TrtcheckError("--max-loss bounds the quantizer search: add --quant")
    if args.precision in (None, "fp32"):
        raise TrtcheckError("trtcheck precision needs --precision fp16 or --precision bf16 (fp32 keeps every node in float32)")
    if args.fp32_nodes:
        raise TrtcheckError("trtcheck precision searches for fp32_nodes itself: drop --fp32-nodes")
    settings = _settings(args)  # at --precision, so --use-fp32-acc and --autocast hold there
    loaded = _load(args.model)
    with _still_working(f"searching the float32 nodes of {loaded.name}"):
        found = search_fp32_nodes(
            loaded.eager_model(), loaded.example_inputs, args.precision, settings, backend=args.backend,
            example_kwargs=loaded.example_kwargs, inputs=loaded.input_sets, num_inputs=args.num_inputs, seed=args.seed,
            budget=args.budget, name=loaded.name,
        )
    print(found)
    return 0 if found.fp32_nodes is not None else 1


def _quantizers(args: argparse.Namespace) -> int:
    """``precision --quant``: the ModelOpt quantizers to leave unquantized for the outputs to stay within
    ``--max-loss`` of the float model: exit 0 when a set is found (or none is needed), 1 when none is."""
    from trtcheck.verification.quant_search import search_quantizers  # deferred: it imports torch

    if args.max_loss is None:
        raise TrtcheckError("trtcheck precision --quant needs --max-loss: the largest loss against the float model, "
                            "relative to the outputs' scale (0.01: 1%)")
    if args.precision not in (None, "fp32"):
        raise TrtcheckError("trtcheck precision --quant searches quantizers at fp32: drop --precision")
    loaded = _load(args.model)
    with _still_working(f"searching the quantizers of {loaded.name}"):
        found = search_quantizers(loaded.eager_model(), loaded.example_inputs, args.max_loss,
                                  example_kwargs=loaded.example_kwargs, num_inputs=args.num_inputs, seed=args.seed,
                                  name=loaded.name)
    print(found)
    return 0 if found.found else 1


PROGRESS_EVERY_S = 10.0  # how often a long verify says it is still working


@contextlib.contextmanager
def _still_working(what: str) -> Iterator[None]:
    """Every ``PROGRESS_EVERY_S`` seconds, one stderr line saying ``what`` is still running and for how long: a
    large model verifies for minutes (lowered and converted twice, four input sets, float64 references), and
    a silent command looks hung. Stdout keeps only the report."""
    done = threading.Event()
    start = time.monotonic()

    def tell() -> None:
        while not done.wait(PROGRESS_EVERY_S):
            print(f"trtcheck: {what}: still working ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)

    thread = threading.Thread(target=tell, name="trtcheck-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def _repro_warnings_in_our_words() -> Iterator[None]:
    """A repro that cannot be written is one ``trtcheck: warning:`` line naming ``--report-dir``, not a Python
    warning with its source line naming pytest's option; other warnings pass through unchanged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReproWriteWarning)
        try:
            yield
        finally:
            for warning in caught:
                if isinstance(warning.message, ReproWriteWarning):
                    message = warning.message
                    print(f"trtcheck: warning: could not write the repro to {message.folder}: {message.reason}; the result "
                          "stands. Pass --report-dir a writable directory to get the repro", file=sys.stderr)
                else:
                    warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def _compare(args: argparse.Namespace) -> int:
    """One MODEL: a row per partitioner. No MODEL: the zoo and/or random graphs, with the tallies."""
    from trtcheck.lowering.graph import flat_inputs  # deferred: it imports torch
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
    if eager is not None and args.frontend != "export":
        graphs = _captured_graphs(eager, loaded, args.frontend)
        if graphs is not None:  # torch.compile's graphs: one table per graph, headed by the graph break that ended it
            for captured, graph_module, inputs in graphs:
                ended = f"; ended by a graph break at {captured.ended_by}" if captured.ended_by else ""
                print(f"{captured.name}{ended}")
                rows = compare.compare(graph_module, flat_inputs(graph_module, inputs, {}), settings,
                                       name=f"{loaded.name} graph {captured.index}", partitioners=partitioners)
                print(compare.format_rows(rows))
            return 0
    graph_module = _graph_or_model(loaded) if loaded.is_program else trtcheck.lower(eager, loaded.example_inputs, loaded.example_kwargs)
    flat = flat_inputs(graph_module, loaded.example_inputs, loaded.example_kwargs)
    forced = resolve_modules(settings.torch_executed_modules, graph_module.graph, eager)
    rows = compare.compare(graph_module, flat, settings, name=loaded.name, partitioners=partitioners, forced_modules=forced)
    print(compare.format_rows(rows))  # each row's note is in its last column: not printed again below
    return 0


def _captured_graphs(eager: Any, loaded: Any, frontend: str) -> list[tuple[Any, Any, tuple]] | None:
    """torch.compile's graphs of ``eager`` (with compute nodes), each lowered on the inputs of its first call, where
    ``frontend`` asks for them (``compile``, or ``auto`` when torch.export refuses the model); None otherwise."""
    from trtcheck.dynamo import capture  # deferred: it imports torch

    if frontend == "auto":
        try:
            trtcheck.lower(eager, loaded.example_inputs, loaded.example_kwargs)
            return None
        except ExportRefusedError as error:
            print(f"{str(error).splitlines()[0]}; comparing torch.compile's graphs instead (--frontend auto)")
    captured, _ = capture(eager, [tuple(loaded.example_inputs)], loaded.example_kwargs)
    return [(graph, trtcheck.lower(graph.graph_module, graph.calls[0][1]), graph.calls[0][1])
            for graph in captured.graphs if graph.calls and graph.compute_nodes]


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


def _names(value: str) -> list[str]:
    """``aten::relu,aten::add`` -> both names: one option word holds a list, so the option never eats MODEL."""
    return [name.strip() for name in value.split(",") if name.strip()]


def _common_parser() -> argparse.ArgumentParser:
    """The options every command takes."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on an error, also print what torch logged while the failed step ran (its own tracebacks)")
    return parser


def _settings_parser() -> argparse.ArgumentParser:
    """The ``Settings`` options ``partition``, ``verify`` and ``compare`` share."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("settings (trtcheck.Settings)")
    group.add_argument("--min-block-size", type=int, default=Settings.min_block_size, metavar="N")
    # One value per occurrence (comma lists, or the option repeated): a list option taking every word after it
    # would swallow MODEL (`--torch-executed-ops aten::relu mine.py:build` left no target).
    group.add_argument("--torch-executed-ops", type=_names, action="extend", default=[], metavar="OP[,OP...]",
                       help="repeatable, or comma separated, e.g. aten::relu,aten.add.Tensor")
    group.add_argument("--torch-executed-modules", type=_names, action="extend", default=[], metavar="MODULE[,MODULE...]",
                       help="class names or paths, repeatable or comma separated, e.g. layer1.0")
    group.add_argument("--segmentation", choices=SEGMENTATIONS, default=Settings.segmentation)
    group.add_argument("--require-full-compilation", action="store_true")
    group.add_argument("--precision", choices=PRECISIONS, default=None, help="engine precision (ONNX Runtime emulates it; default fp32)")
    group.add_argument("--fp32-nodes", type=_names, action="extend", default=[], metavar="NODE[,NODE...]",
                       help="with --precision fp16/bf16: nodes (or ops, aten::name) kept in float32")
    group.add_argument("--use-fp32-acc", action="store_true",
                       help="with --precision fp16/bf16: matmuls read reduced-precision inputs, multiply and accumulate in float32 "
                            "(Torch-TensorRT's use_fp32_acc)")
    group.add_argument("--autocast", choices=tuple(AUTOCAST_POLICIES), default=None, metavar="POLICY",
                       help="with --precision fp16/bf16: keep more nodes in float32 by a named rule set; torch_tensorrt: "
                            "Torch-TensorRT's enable_autocast rules with its defaults")
    group.add_argument("--tf32", action="store_true",
                       help="float32 matmuls and convolutions multiply TF32 values (10-bit mantissas), as TensorRT and "
                            "Torch-TensorRT deploy by default; verify judges them against eager under TF32 rounding")
    return parser


FRONTEND_CHOICES = ("auto", "export", "compile")
FRONTEND_HELP = ("how the model becomes graphs: auto (torch.export, and torch.compile's graphs where export refuses the "
                 "model), export, or compile (docs/graph-breaks.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trtcheck", description=(trtcheck.__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trtcheck {trtcheck.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    common = _common_parser()
    settings = _settings_parser()

    part = commands.add_parser("partition", parents=[settings, common], help="partition a model and print its segments")
    part.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    part.add_argument("--graphs", action="store_true",
                      help="print every segment's graph (the printout of Torch-TensorRT's partitioning design)")
    part.add_argument("--explain", action="store_true", help="print where each node runs and why, after the summary")
    part.add_argument("--html", metavar="FILE", help="write a self-contained HTML page drawing the partitioned graph")
    part.add_argument("--frontend", choices=FRONTEND_CHOICES, default="auto", help=FRONTEND_HELP)
    part.set_defaults(run=_partition)

    ver = commands.add_parser(
        "verify", parents=[settings, common], help="compile a model and check it against eager PyTorch (exit 1 on failure)"
    )
    ver.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    ver.add_argument("--backend", default="auto", help="onnxruntime, tensorrt, or auto (TensorRT when present)")
    ver.add_argument("--allow-fallbacks", action="store_true", help="accept TensorRT segments that fell back to PyTorch")
    ver.add_argument("--num-inputs", type=int, default=3, metavar="N", help="input sets: the example, then N-1 random ones")
    ver.add_argument("--seed", type=int, default=0, help="seed of the random input sets")
    ver.add_argument("--report-dir", metavar="DIR", help="write a standalone repro here when verification fails")
    ver.add_argument("--frontend", choices=FRONTEND_CHOICES, default="auto", help=FRONTEND_HELP)
    ver.set_defaults(run=_verify)

    red = commands.add_parser(
        "reduce", parents=[settings, common],
        help="reduce a mismatch to the smallest failing sets of nodes, one repro folder each (exit 1 when one is found)",
    )
    red.add_argument("model", metavar="MODEL", help=MODEL_HELP + ", or a repro folder a failing verify wrote")
    red.add_argument("--backend", default="auto", help="onnxruntime, tensorrt, or auto (TensorRT when present)")
    red.add_argument("--out", metavar="DIR", help="where the repro folders go (default: trtcheck-reduced-NAME)")
    red.add_argument("--budget", type=float, default=0, metavar="SECONDS", help="stop reducing after this long (0: no limit)")
    red.add_argument("--num-inputs", type=int, default=3, metavar="N", help="input sets tried: the example, then N-1 random ones")
    red.add_argument("--seed", type=int, default=0, help="seed of the random input sets")
    red.set_defaults(run=_reduce)

    pre = commands.add_parser(
        "precision", parents=[settings, common],
        help="search the nodes to keep in float32 for a model to verify in fp16/bf16 (exit 1 when no set does)",
    )
    pre.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    pre.add_argument("--backend", default="auto", help="onnxruntime, tensorrt, or auto (TensorRT when present)")
    pre.add_argument("--budget", type=float, default=300.0, metavar="SECONDS", help="stop shrinking the set after this long")
    pre.add_argument("--num-inputs", type=int, default=3, metavar="N", help="input sets: the example, then N-1 random ones")
    pre.add_argument("--seed", type=int, default=0, help="seed of the random input sets")
    pre.add_argument("--quant", action="store_true", help="a ModelOpt-quantized model: search the quantizers to leave "
                     "unquantized instead (with --max-loss)")
    pre.add_argument("--max-loss", type=float, default=None, metavar="LOSS", help="with --quant: the largest loss "
                     "against the float model, relative to the outputs' scale (0.01: 1%%)")
    pre.set_defaults(run=_precision)

    cmp = commands.add_parser(
        "compare", parents=[settings, common], help="partition one graph with every partitioner at hand: segments, engines, bytes, time"
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
    cmp.add_argument("--frontend", choices=FRONTEND_CHOICES, default="auto", help=FRONTEND_HELP + "; with MODEL only")
    cmp.set_defaults(run=_compare)

    rep = commands.add_parser("report", parents=[common], help="Markdown/HTML report and plots from pytest-benchmark JSON files")
    rep.add_argument("runs", nargs="+", metavar="RUN.json", help="pytest --benchmark-json files; the latest by datetime is reported")
    rep.add_argument("--out", required=True, metavar="DIR", help="directory for report.md, report.html and the plots")
    rep.add_argument("--baseline", metavar="FILE", help="compare against this run (default: the previous run among RUN.json)")
    rep.add_argument("--threshold", type=float, default=None,
                     help="flag a stitched median slower by more than this fraction (default: trtcheck.report.DEFAULT_THRESHOLD)")
    rep.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any regression is flagged")
    rep.add_argument("--allow-cross-machine", action="store_true", help="compare against a baseline from another machine")
    rep.set_defaults(run=_report)
    return parser


def _import_from_the_current_directory() -> None:
    """Put the current directory first on the import path, as ``python -m`` does: a console script starts with
    its own folder there instead, so ``trtcheck verify mymodels.nets:build`` could not import the ``mymodels``
    beside the user."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def main(argv: Sequence[str] | None = None) -> int:
    _import_from_the_current_directory()
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TrtcheckError as error:
        log = _torch_log(error)
        if log and args.verbose:
            print(f"trtcheck: what torch logged while it failed:\n{log}", file=sys.stderr)
        print(f"trtcheck: error: {error}", file=sys.stderr)
        if log and not args.verbose:
            lines = len(log.splitlines())
            print(f"trtcheck: torch logged {lines} line(s) of its own while it failed (tracebacks of the failure above): "
                  "rerun with --verbose to see them", file=sys.stderr)
        return 2


def _torch_log(error: BaseException) -> str:
    """What torch logged while the step that raised ``error`` ran (``LoweringError.torch_log``), from ``error`` or
    any error it was raised from; '' when none kept a log."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        log = getattr(current, "torch_log", "")
        if log:
            return log
        current = current.__cause__ or current.__context__
    return ""


if __name__ == "__main__":
    sys.exit(main())
