"""The corpus sweep as a test tier (``sweep``: nightly, ``pytest --sweeps suites/corpus``): every torchvision model
verifies at the default settings and is one engine per graph it runs as, or fails as ``EXPECTED`` says and why.

What each row measured, and the command, is in docs/performance.md ("The corpus sweep"); ``suites/corpus/sweep.py``
prints the same rows as a table.
"""

from __future__ import annotations

import pytest

from suites.corpus.sweep import Entry, Row, sweep_one, timm_entries, torchvision_entries

PACKED = "packed parameters"
"""torchvision's ``quantized_*`` builders: eager-mode int8 with packed weights, which torch.export cannot capture;
the refusal says so and points to explicit Q/DQ (docs/quantization.md)."""

EXPECTED: dict[str, tuple[str, str]] = {}  # model -> (verdict, a substring of the row's detail)
_TORCHVISION = torchvision_entries()
for _entry in _TORCHVISION:
    if _entry.name.startswith("quantized_"):
        EXPECTED[_entry.name] = ("REFUSED", PACKED)

SPLIT_BY_DESIGN = frozenset(e.name for e in _TORCHVISION if e.input_sets is not None)
"""The detectors: verified across torch.compile's graph breaks (docs/graph-breaks.md), they PASS but are not one
engine per graph: torchvision's roi_align has no converter, a topk whose indices are read (ties may order
differently in TensorRT) and the uninitialized ``empty`` stay in PyTorch, and the pieces between those fall under
min_block_size (each Torch node and its reason: docs/performance.md, "The corpus sweep")."""

LARGE = 150e6
"""Parameters above which a model is left to the nightly's memory: vit_h_14 and regnet_y_128gf (645M) verify in
float64 too, several copies of their weights on a 24 GiB machine."""


def _judge(entry: Entry, row: Row) -> None:
    verdict, detail = EXPECTED.get(entry.name, ("PASS", ""))
    assert row.verdict in (verdict, "SKIPPED"), f"{entry.name}: {row.verdict}: {row.detail or row.torch_ops}"
    assert detail in row.detail, row.detail
    if verdict == "PASS" and row.verdict == "PASS" and entry.name not in SPLIT_BY_DESIGN:
        assert row.torch_segments == 0 and row.one_engine, f"{entry.name} is {row.tensorrt_segments} engines and " \
            f"{row.torch_segments} Torch segments over {row.graphs} graph(s): {row.torch_ops}"


@pytest.mark.sweep
@pytest.mark.parametrize("entry", _TORCHVISION, ids=[e.name for e in _TORCHVISION])
def test_every_torchvision_model_verifies_as_one_engine(entry: Entry) -> None:
    _judge(entry, sweep_one(entry, max_params=LARGE))


_TIMM = timm_entries()


@pytest.mark.sweep
@pytest.mark.skipif(not _TIMM, reason="timm is not installed (pip install timm): its rows are optional")
@pytest.mark.parametrize("entry", _TIMM, ids=[e.name for e in _TIMM])
def test_one_timm_model_per_family_verifies(entry: Entry) -> None:
    row = sweep_one(entry, max_params=LARGE)
    assert row.verdict in ("PASS", "SKIPPED"), f"{entry.name}: {row.verdict}: {row.detail or row.torch_ops}"
