"""What localizing and reducing a mismatch cost, against the failing ``verify`` they explain (issue 23).

    python -m suites.benchmarks.bench_localize [--models resnet50 hf_bert] [--op aten.add.Tensor ...]

Per model, one bug is planted through the public converter registry (``suites.verification.planted``): the
middle node of the model's lowered graph calling the model's op (``--op``, default per model) computes its
right output times 1.001. Then, in one process, each timed once:

* ``verify``: ``trtcheck.verify(model, inputs, backend="onnxruntime", localize_budget=0)``, which fails (the
  time to the ``VerificationError``: compile, invariants, determinism, every input set, float64 reference);
* ``localize``: ``localize.localize`` on a module compiled the same way, on the example inputs (it records
  eager's values, runs each engine on them, bisects with sub-engines cut and built as compile cuts and builds
  segments, isolates the culprit, float64 at it);
* ``reduce``: ``reduce.reduce_compiled`` on the same, until every independent culprit is found (one here).

It prints each time, the ratios localize/verify (target: at most 3) and reduce/verify (target: at most 10), and
whether the named culprit is the planted node and the reduction ends at <= 3 nodes holding it. A benchmark,
not a test: it prints what one run measured and asserts nothing. Denormals are flushed (see bench_compile).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

import trtcheck
from suites.verification.planted import off_by, planted
from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import flat_inputs
from trtcheck.verification.localize import localize
from trtcheck.verification.reduce import reduce_compiled
from trtcheck_zoo import registry as zoo

ORT = "onnxruntime"
DEFAULT_OPS = {"resnet50": "aten.add.Tensor", "hf_bert": "aten.gelu.default", "padded_transformer": "aten.addmm.default"}


def _op(name: str) -> torch._ops.OpOverload:
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def measure(name: str, op_name: str) -> None:
    model, inputs = zoo.get(name).build()
    target = _op(op_name)
    calls = [node.name for node in lower(model, inputs).graph.nodes if node.op == "call_function" and node.target is target]
    node = calls[len(calls) // 2]
    with planted(target, {node}, off_by(1.001)):
        start = time.perf_counter()
        try:
            trtcheck.verify(model, inputs, backend=ORT, localize_budget=0)
            print(f"{name}: verify passed with {node} planted: nothing to localize")
            return
        except trtcheck.VerificationError:
            verify_s = time.perf_counter() - start
        compiled = trtcheck.compile(model, inputs, backend=ORT)
        flat = flat_inputs(compiled.partition.graph_module, inputs, {})
        start = time.perf_counter()
        found = localize(compiled, flat, ORT, budget=None)
        localize_s = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            reduction = reduce_compiled(compiled, flat, ORT, out_dir=out)
            reduce_s = time.perf_counter() - start
    named = found.culprit.node if found.culprit is not None else None
    sizes = [len(culprit.nodes) for culprit in reduction.culprits]
    holds = bool(reduction.culprits) and node in reduction.culprits[0].nodes
    nodes = len(compiled.partition.graph_module.graph.nodes)
    print(f"{name} ({nodes} nodes, {op_name} at {node} off by 1.001):")
    print(f"  failing verify   {verify_s:7.1f} s")
    print(f"  localize         {localize_s:7.1f} s  {localize_s / verify_s:5.2f}x verify (target <= 3)  "
          f"culprit {named} ({'the planted node' if named == node else 'NOT the planted node'}), {found.sub_engines} sub-engines")
    print(f"  reduce           {reduce_s:7.1f} s  {reduce_s / verify_s:5.2f}x verify (target <= 10)  "
          f"culprits of {sizes} nodes ({'holding' if holds else 'NOT holding'} the planted node), {reduction.tests} sub-engines",
          flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "hf_bert"])
    parser.add_argument("--op", nargs="*", default=None, help="the op planted per model (default: DEFAULT_OPS)")
    args = parser.parse_args(argv)
    torch.set_flush_denormal(True)
    print(f"torch threads: {torch.get_num_threads()}")
    for index, name in enumerate(args.models):
        op_name = args.op[index] if args.op and index < len(args.op) else DEFAULT_OPS.get(name, "aten.add.Tensor")
        measure(name, op_name)


if __name__ == "__main__":
    main()
