"""Collect the distinct core-ATen overloads of the torchvision model zoo (run by hand, slow).

Usage: PYTHONPATH=. python -m suites.conversion.collect_zoo_overloads > suites/conversion/zoo_overloads.txt

The output file is what ``test_registry.py`` checks against: every overload listed must have a
converter. Re-run it when torch/torchvision are upgraded.
"""

from __future__ import annotations

import sys
import time

import torch

import trtcheck_zoo as models


def overloads_of(name: str) -> set[str]:
    """The ``str()`` of every call_function target in the zoo model's core-ATen graph."""
    model, inputs = models.get(name).build()
    with torch.no_grad():
        ep = torch.export.export(model, inputs).run_decompositions()
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


def main() -> None:
    per_model: dict[str, set[str]] = {}
    for name in models.TORCHVISION_ZOO:
        start = time.time()
        per_model[name] = overloads_of(name)
        print(f"# {name}: {len(per_model[name])} overloads, {time.time() - start:.0f}s", file=sys.stderr, flush=True)
    everything = sorted(set().union(*per_model.values()))
    for op in everything:
        users = [m for m, ops in per_model.items() if op in ops]
        print(f"{op}  # {', '.join(users)}")


if __name__ == "__main__":
    main()
