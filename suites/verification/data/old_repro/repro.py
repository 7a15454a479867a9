#!/usr/bin/env python
"""Reproduce a failing trtcheck check: planted: a tiny model for old-format loading

Run from anywhere: ``python repro.py`` reruns the check (raising ``trtcheck.VerificationError`` while the
bug is there); ``python repro.py --dry-run`` only loads the model, inputs and settings and describes them.
The full failure is in failure.txt; graph.py shows the graph's code. Written by trtcheck.verification.repro.
"""

import argparse
import pathlib

import torch

import trtcheck
from trtcheck.verification.repro import load_repro, register_recorded_converters

HERE = pathlib.Path(__file__).resolve().parent
BACKEND = 'onnxruntime'


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    return repr(value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="load and describe everything, verify nothing")
    args = parser.parse_args(argv)

    case = load_repro(HERE)  # every file of this folder, read by the module that wrote it
    model, inputs, settings = case.model, case.example_inputs, case.settings  # a torch.fx.GraphModule, its inputs
    options, not_recorded, given = case.options, case.not_recorded, case.input_sets  # dynamic_shapes, rtol...
    print("recorded failure:", case.failure.strip().splitlines()[0])
    converters = register_recorded_converters(HERE / "converters.json")  # the user's own, as when it failed
    for line in converters:
        print("converter:", line)
    for line in not_recorded:
        print("NOT recorded, so not passed to verify:", line)
    if args.dry_run:
        nodes = list(model.graph.nodes)
        ops = sum(node.op == "call_function" for node in nodes)
        print(f"model: {type(model).__name__} with {len(nodes)} nodes ({ops} calls)")
        for index, value in enumerate(inputs):
            print(f"input {index}: {describe(value)}")
        print(f"settings: {settings!r}")
        print(f"verify options: {options!r}")
        print(f"input sets besides the example: {len(given) if given is not None else 'drawn by verify'}")
        print(f"backend: {BACKEND}")
        print("dry run: trtcheck.verify not called")
        return 0
    report = trtcheck.verify(model, inputs, settings=settings, backend=BACKEND, inputs=given, **options)
    print(report)
    missing = [line for line in converters if line.startswith("NOT registered")]
    print("verify passed: the failure did not reproduce" + (f" ({len(missing)} of its converters could not be registered: see above)"
                                                             if missing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
