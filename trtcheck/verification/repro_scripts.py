"""The two ``repro.py`` scripts ``repro`` writes into its folders, as ``str.format`` templates.

``SCRIPT`` (a failing ``verify``'s folder: ``{backend}``, ``{failure}``) reruns ``trtcheck.verify`` on what the folder
holds, or with ``--dry-run`` only describes it; ``SUBGRAPH_SCRIPT`` (one culprit ``reduce`` found: ``{name}``,
``{count}``) checks that culprit's engine against PyTorch and prints FAIL or PASS. They are programs of their own,
a hundred lines of text that ``repro``'s code never reads, so they live apart from the code that writes the folders.
Each imports the names it uses from where they live; a script written by an older trtcheck imports
``load_repro`` / ``load_subgraph_repro`` and ``register_recorded_converters`` from ``trtcheck.verification.repro``,
which keeps them.
"""

SCRIPT = '''\
#!/usr/bin/env python
"""Reproduce a failing trtcheck check: {failure}

Run from anywhere: ``python repro.py`` reruns the check (raising ``trtcheck.VerificationError`` while the
bug is there); ``python repro.py --dry-run`` only loads the model, inputs and settings and describes them.
The full failure is in failure.txt; graph.py shows the graph's code. Written by trtcheck.verification.repro.
"""

import argparse
import pathlib

import torch

import trtcheck
from trtcheck.verification.recorded_converters import register_recorded_converters
from trtcheck.verification.repro import load_repro

HERE = pathlib.Path(__file__).resolve().parent
BACKEND = {backend!r}


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={{tuple(value.shape)}}, dtype={{value.dtype}}, device={{value.device}})"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{{" + ", ".join(f"{{k!r}}: {{describe(v)}}" for k, v in value.items()) + "}}"
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
        print(f"model: {{type(model).__name__}} with {{len(nodes)}} nodes ({{ops}} calls)")
        for index, value in enumerate(inputs):
            print(f"input {{index}}: {{describe(value)}}")
        print(f"settings: {{settings!r}}")
        print(f"verify options: {{options!r}}")
        print(f"input sets besides the example: {{len(given) if given is not None else 'drawn by verify'}}")
        print(f"backend: {{BACKEND}}")
        print("dry run: trtcheck.verify not called")
        return 0
    report = trtcheck.verify(model, inputs, settings=settings, backend=BACKEND, inputs=given, **options)
    print(report)
    missing = [line for line in converters if line.startswith("NOT registered")]
    print("verify passed: the failure did not reproduce" + (f" ({{len(missing)}} of its converters could not be registered: see above)"
                                                             if missing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''


SUBGRAPH_SCRIPT = '''\
#!/usr/bin/env python
"""{name}: {count} node(s) of a lowered graph whose engine differs from PyTorch, reduced by trtcheck.

``python repro.py`` converts subgraph.pt to ONNX, builds its engine on the recorded backend, runs it on the real
values recorded at its inputs (inputs.pt) and compares every output with PyTorch's (the tolerances, backend and
the failure's settings, its precision among them, are in settings.json); prints the comparison, then FAIL
(exit 1) or PASS (exit 0). Needs trtcheck, not the model's code. Written by trtcheck.verification.repro.
"""

import pathlib

from trtcheck.conversion import Snapshot
from trtcheck.verification.recorded_converters import register_recorded_converters
from trtcheck.verification.reduce import check_subgraph
from trtcheck.verification.repro import load_subgraph_repro

HERE = pathlib.Path(__file__).resolve().parent


def main():
    module, inputs, config = load_subgraph_repro(HERE)  # the nodes as a torch.fx.GraphModule, the values at its inputs
    print("nodes:", ", ".join(f"{{n}} = {{o}}" for n, o in zip(config["nodes"], config["ops"])))
    with Snapshot():  # the user's converters (converters.json), registered for this check only
        converters = register_recorded_converters(HERE / "converters.json")  # as when it failed
        for line in converters:
            print("converter:", line)
        comparison = check_subgraph(module, inputs, config["backend"], config["rtol"], config["atol"], config.get("settings"))
    print(comparison)
    missing = [line for line in converters if line.startswith("NOT registered")]
    if comparison.passed and missing:
        print(f"({{len(missing)}} of the failure's converters could not be registered: see above)")
    print("PASS" if comparison.passed else "FAIL")
    return 0 if comparison.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
'''
