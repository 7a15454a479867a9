"""The checks both matrices run: verify, or, under require_full_compilation, one engine or a clear error."""

from __future__ import annotations

import pytest
import torch

import trtcheck
from trtcheck import Target

# Deep torchvision models: ONNX Runtime's kernels sum in another order than PyTorch's, and over 20-100
# layers fp32 rounding reaches 1.25e-5 (mnasnet0_5), 4.2e-5 (resnet50) and 3.7e-4 (inception_v3) absolute
# on their logits, at cosine similarity 1.000000 (measured: pytest --trtcheck with torch's fp32 defaults).
# Their absolute tolerance is therefore 1e-4 of the largest eager logit; a wrong converter errs by the
# logits' own magnitude and still fails by orders of magnitude. rtol stays torch's fp32 default.
DEEP_MODEL_ATOL = 1e-4


_SCALES: dict[str, float] = {}  # per zoo entry: its build is seeded, so every preset's model gives the same logits


def zoo_tolerances(entry, model, inputs) -> dict:
    if "torchvision" not in entry.tags:
        return {}
    if entry.name not in _SCALES:
        with torch.no_grad():
            _SCALES[entry.name] = float(model(*inputs).abs().max())
    return {"atol": DEEP_MODEL_ATOL * max(_SCALES[entry.name], 1.0)}


def entry_options(entry) -> dict:
    """What a zoo entry adds to verify: its own input sets, where random ones leave its input domain, and its
    dynamic sizes (verify then checks the minimum, maximum and random sizes in range)."""
    options = {"inputs": entry.input_sets()} if entry.input_sets is not None else {}
    if entry.dynamic_shapes is not None:
        options["dynamic_shapes"] = entry.dynamic_shapes
    return options


def check_model(model, example_inputs, settings, verify, **verify_options):
    dynamic_shapes = verify_options.get("dynamic_shapes")
    if not settings.require_full_compilation:
        report = verify(model, example_inputs, **verify_options)  # raises VerificationError on any failure
        # What a PASS must have covered: the example, a second call of it, and at least one other input set.
        assert len(report.comparisons) >= 3, f"only {len(report.comparisons)} input sets compared"
        if dynamic_shapes is not None:  # and a dynamic model: its smallest and largest sizes too
            assert any(s.startswith("min") for s in report.input_sets), report.input_sets
            assert any(s.startswith("max") for s in report.input_sets), report.input_sets
        return
    single = trtcheck.partition(model, example_inputs, trtcheck.Settings(min_block_size=1), dynamic_shapes=dynamic_shapes)
    blockers = [node.name for segment in single.segments_of(Target.TORCH) for node in segment.nodes]
    if not single.segments:  # nothing to compile (every node dead or a placeholder): refused, saying so
        with pytest.raises(trtcheck.PartitionError, match="no compute nodes"):
            verify(model, example_inputs, **verify_options)
    elif blockers:  # the error must name what stops full compilation
        with pytest.raises(trtcheck.PartitionError, match=rf"\b{blockers[0]}\b"):
            verify(model, example_inputs, **verify_options)
    else:
        report = verify(model, example_inputs, **verify_options)
        assert [s.target for s in report.partition.segments] == [Target.TENSORRT]
