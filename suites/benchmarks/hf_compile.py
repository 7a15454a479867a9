"""Per ``hf`` zoo entry, at the default settings on ONNX Runtime: engines, op coverage, compile time, max |diff|.

    python -m suites.benchmarks.hf_compile [NAME ...]     # REPEAT=3 for the fastest of three compiles

The figures of issue 22's closing note; a benchmark, not a test (the test is
``suites/models/test_hf_models.py::test_entry_compiles_to_one_engine_at_the_default_settings``).
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import torch
from torch.utils._pytree import tree_leaves

import trtcheck
import trtcheck_zoo as models


def main(names: list[str]) -> None:
    warnings.filterwarnings("ignore")
    repeat = int(os.environ.get("REPEAT", "1"))
    for name in names or models.HF_ZOO:
        entry = models.get(name)
        model, inputs = entry.build()
        times = []
        started = time.perf_counter()
        try:
            for _ in range(repeat):  # the fastest of REPEAT compiles: the machine may be shared
                started = time.perf_counter()
                compiled = trtcheck.compile(model, inputs, backend="onnxruntime", dynamic_shapes=entry.dynamic_shapes)
                times.append(time.perf_counter() - started)
        except trtcheck.TrtcheckError as error:
            print(f"{name}: compile FAILED after {time.perf_counter() - started:.1f}s: {type(error).__name__}: "
                  f"{str(error).splitlines()[0][:300]}", flush=True)
            continue
        lines = compiled.partition.explain_summary().splitlines()
        with torch.no_grad():
            want, got = model(*inputs), compiled(*inputs)
        diff = max(float((a - b).abs().max()) for a, b in zip(tree_leaves(want), tree_leaves(got)) if a.is_floating_point())
        print(f"{name}: compile {min(times):.1f}s | {lines[0]} | {lines[1]} | max |diff| {diff:.1e} | {type(got).__name__}", flush=True)
        for line in lines[2:]:
            print("    " + line)


if __name__ == "__main__":
    main(sys.argv[1:])
