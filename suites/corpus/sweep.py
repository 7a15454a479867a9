"""The corpus sweep: models no one here wrote, verified as a new user would, one row each.

Every ``torchvision.models.list_models()`` entry and one timm model per family (timm's module: ``resnet``,
``vision_transformer``, ...; timm is optional, its rows are left out where it is not installed), randomly
initialised, at small inputs, through ``trtcheck.verify`` at the default settings on ONNX Runtime. Each row says
the verdict, how many TensorRT and Torch segments the model became, the coverage, every Torch node's op and reason,
and how long verify took against one eager call: what decides whether a real model is one engine, and where the
time goes when it is not.

Run it (the whole of it is nightly-sized: hours on 2 cores)::

    python -m suites.corpus.sweep --corpus torchvision --max-params 100e6 --json sweep.json
    python -m suites.corpus.sweep --only resnet18,swin3d_t

``suites/corpus/test_corpus.py`` (the ``sweep`` tier) holds each torchvision model to the row recorded in
``EXPECTED``; the table and its command are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torchvision.models
from torch import nn

import trtcheck
from suites.benchmarks.bench_quantized import median_call
from trtcheck.errors import TrtcheckError, VerificationError
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.reasons import Target
from trtcheck_zoo.detection_models import build_detector, detector_images

__all__ = ["Entry", "Row", "entries", "main", "sweep_one", "table", "timm_entries", "torchvision_entries"]


@dataclass(frozen=True)
class Entry:
    """One model of a corpus: how to build it with its example inputs, and input sets that suit it (or None)."""

    corpus: str
    name: str
    build: Callable[[], tuple[nn.Module, tuple[Any, ...]]]
    input_sets: Callable[[], list[tuple[Any, ...]]] | None = None


@dataclass
class Row:
    """What the sweep found for one model (``verdict``: PASS, FAIL, REFUSED, ERROR or SKIPPED)."""

    corpus: str
    name: str
    verdict: str
    tensorrt_segments: int = 0
    torch_segments: int = 0
    coverage: float = 0.0
    torch_ops: dict[str, str] = field(default_factory=dict)  # op -> the first reason given for it
    graphs: int = 1  # captured graphs (more than 1: verified through torch.compile's graph breaks)
    parameters: int = 0
    verify_seconds: float = 0.0
    eager_ms: float = 0.0
    detail: str = ""

    @property
    def one_engine(self) -> bool:
        return self.verdict == "PASS" and self.torch_segments == 0 and self.tensorrt_segments == self.graphs


# Per-module input shapes (batch 1) at the smallest size each family takes; a name's own entry comes first.
_IMAGE = (1, 3, 96, 96)
_SHAPES: dict[str, tuple[int, ...]] = {
    "video": (1, 3, 8, 64, 64),
    "s3d": (1, 3, 16, 224, 224),  # its last pooling is (2, 7, 7): 224 pixels and 16 frames at the least
    "mvit_v1_b": (1, 3, 16, 224, 224),  # a fixed spatial and temporal size
    "mvit_v2_s": (1, 3, 16, 224, 224),
    "maxvit_t": (1, 3, 224, 224),  # its partitions need 224
    "vit": (1, 3, 224, 224),  # the image size the builders fix (position embeddings); a multiple of 14, 16 and 32
}
_DETECTION_SIZE = 128


def _family(builder: Callable[..., Any]) -> str:
    parts = builder.__module__.split(".")
    return parts[2] if len(parts) > 3 else "classification"


def _torchvision_build(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    builder = torchvision.models.get_model_builder(name)
    family = _family(builder)
    keywords: dict[str, Any] = {"weights": None}
    if family == "quantization":
        keywords["quantize"] = True
    if family == "segmentation":
        keywords["weights_backbone"] = None  # else it downloads the backbone's weights
    model = builder(**keywords).eval()
    shape = _SHAPES.get(name) or _SHAPES.get(name.split("_")[0]) or _SHAPES.get(family) or _IMAGE
    if family == "optical_flow":
        return model, (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128))  # its pyramid needs 128
    return model, (torch.randn(*shape),)


def torchvision_entries() -> list[Entry]:
    """Every ``torchvision.models.list_models()`` entry; detectors at 128 pixels as the zoo builds them."""
    rows = []
    for name in torchvision.models.list_models():
        builder = torchvision.models.get_model_builder(name)
        if _family(builder) == "detection":
            rows.append(Entry("torchvision", name, lambda n=name: build_detector(n, _DETECTION_SIZE),
                              lambda: detector_images(_DETECTION_SIZE)))
        else:
            rows.append(Entry("torchvision", name, lambda n=name: _torchvision_build(n)))
    return rows


_SMALL = re.compile(r"(atto|femto|pico|nano|tiny|xxs|xs|mini|small|_s\b|_t\b|18|10|050|b0|lite0)")


def _smallest_name(names: Sequence[str]) -> str:
    """timm names its small variants; prefer the first such name in ``_SMALL``'s order, else the first name."""
    for token in _SMALL.pattern.strip("()").split("|"):
        matched = [n for n in names if re.search(token, n)]
        if matched:
            return min(matched, key=len)
    return sorted(names)[0]


def _timm_build(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    import timm  # optional: the sweep's timm rows only

    model = timm.create_model(name, pretrained=False).eval()
    size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    return model, (torch.randn(1, *size),)


def timm_entries() -> list[Entry]:
    """One model per timm family (module), its smallest variant by name; none where timm is not installed."""
    try:
        import timm
    except ImportError:
        return []
    rows = []
    for module in sorted(timm.list_modules()):
        names = timm.list_models(module=module)
        if names:
            name = _smallest_name(names)
            rows.append(Entry("timm", name, functools.partial(_timm_build, name)))
    return rows


def entries(corpus: str = "all") -> list[Entry]:
    chosen = {"torchvision": torchvision_entries, "timm": timm_entries}
    return [e for key, make in chosen.items() if corpus in ("all", key) for e in make()]


def _partitions(report: Any) -> Iterator[Any]:
    """The partitions a report holds: one, or one per verified graph of a model verified across graph breaks."""
    if hasattr(report, "partition"):
        yield report.partition
        return
    for verdict in report.graphs:
        if verdict.report is not None:
            yield verdict.report.partition


def _fill(row: Row, report: Any) -> None:
    partitions = list(_partitions(report))
    row.graphs = max(len(partitions), 1)
    compute = tensorrt = 0
    for partition in partitions:
        summary = ExplainSummary.of(partition)
        compute, tensorrt = compute + summary.compute_nodes, tensorrt + summary.tensorrt_nodes
        row.tensorrt_segments += len(summary.engines)
        for _, part in partition.walk():
            for segment in part.segments_of(Target.TORCH):
                row.torch_segments += 1
                for node in segment.nodes:
                    row.torch_ops.setdefault(str(node.target), str(part.reasons[node]))
    row.coverage = 100.0 * tensorrt / compute if compute else 0.0


def sweep_one(entry: Entry, settings: trtcheck.Settings | None = None, max_params: float | None = None) -> Row:
    """Build ``entry`` (seed 0), time eager (median of 3 calls after 2 untimed), verify it at ``settings`` (the
    defaults) on ONNX Runtime."""
    torch.manual_seed(0)
    row = Row(entry.corpus, entry.name, "ERROR")
    try:
        model, inputs = entry.build()
    except Exception as error:  # noqa: BLE001 - a builder failing is a row, not the end of the sweep
        row.detail = f"could not build: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return row
    row.parameters = sum(p.numel() for p in model.parameters())
    if max_params is not None and row.parameters > max_params:
        row.verdict, row.detail = "SKIPPED", f"{row.parameters / 1e6:.0f}M parameters, over --max-params"
        return row
    start = time.perf_counter()
    try:
        row.eager_ms = 1000 * median_call(model, inputs, 3)
        start = time.perf_counter()
        sets = entry.input_sets() if entry.input_sets else None
        report = trtcheck.verify(model, inputs, settings, backend="onnxruntime", inputs=sets, localize_budget=0)
        row.verdict = "PASS"
    except VerificationError as error:
        report, row.verdict = error.report, "FAIL"
        row.detail = str(error).splitlines()[0]
    except TrtcheckError as error:
        report, row.verdict = None, "REFUSED"
        row.detail = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    except Exception as error:  # noqa: BLE001 - a crash is the finding this row reports
        report = None
        row.detail = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    row.verify_seconds = time.perf_counter() - start
    if report is not None:
        _fill(row, report)
    return row


def table(rows: Sequence[Row]) -> str:
    """A markdown table of ``rows`` and a count line per verdict."""
    lines = ["| corpus | model | verdict | engines | Torch segments | coverage | verify s | eager ms | Torch ops (reason) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ops = "; ".join(f"{op}: {reason[:90]}" for op, reason in r.torch_ops.items()) or r.detail[:120]
        lines.append(f"| {r.corpus} | {r.name} | {r.verdict} | {r.tensorrt_segments} | {r.torch_segments} | "
                     f"{r.coverage:.1f}% | {r.verify_seconds:.1f} | {r.eager_ms:.1f} | {ops.replace('|', '/')} |")
    counts = Counter(r.verdict for r in rows)
    one = sum(r.one_engine for r in rows)
    lines.append("")
    lines.append(f"{len(rows)} models: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; one engine (per graph): {one}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.corpus.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("all", "torchvision", "timm"), default="all")
    parser.add_argument("--only", default="", help="comma-separated model names (any timm model's, with --corpus timm)")
    parser.add_argument("--skip", default="", help="comma-separated model names to leave out")
    parser.add_argument("--max-params", type=float, default=None, help="skip models with more parameters")
    parser.add_argument("--json", default=None, help="write the rows here (appended as they finish)")
    options = parser.parse_args(argv)
    only, skip = set(filter(None, options.only.split(","))), set(filter(None, options.skip.split(",")))
    chosen = entries(options.corpus)
    named = {entry.name for entry in chosen}
    if options.corpus in ("all", "timm"):  # a timm model --only names that is not its family's pick
        chosen += [Entry("timm", name, functools.partial(_timm_build, name)) for name in sorted(only - named)]
    rows = []
    for entry in chosen:
        if (only and entry.name not in only) or entry.name in skip:
            continue
        row = sweep_one(entry, max_params=options.max_params)
        rows.append(row)
        print(f"{row.corpus} {row.name}: {row.verdict} {row.tensorrt_segments}+{row.torch_segments} segments "
              f"{row.coverage:.1f}% {row.verify_seconds:.1f}s {dict(list(row.torch_ops.items())[:3]) or row.detail[:200]}",
              flush=True)
        if options.json:
            with open(options.json, "w") as handle:
                json.dump([dataclasses.asdict(r) for r in rows], handle, indent=1)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
