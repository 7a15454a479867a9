"""What running a compiled module loads: no converter, and for the engines nothing of the front half.

A process that only runs compiled modules (or builds engines from finished ONNX) must not pay for the converter
library: importing ``trtcheck.conversion`` registers every converter module. Each check runs in a fresh interpreter,
so that what this pytest session imported already does not hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_LOADED = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('trtcheck'))))"


def loaded_by(statement: str) -> list[str]:
    """The trtcheck modules a fresh interpreter has loaded after running ``statement``."""
    result = subprocess.run([sys.executable, "-c", f"{statement}\n{_LOADED}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", ["trtcheck.runtime", "trtcheck.engines"])
def test_importing_it_loads_no_converter(package):
    loaded = loaded_by(f"import {package}")
    assert package in loaded  # the probe reads the child's modules
    assert [m for m in loaded if m.startswith("trtcheck.conversion")] == []


def test_importing_the_engines_loads_nothing_of_the_front_half_or_the_compiler():
    loaded = loaded_by("import trtcheck.engines")
    front = ("trtcheck.lowering", "trtcheck.partitioning", "trtcheck.shapes", "trtcheck.compiler")
    assert [m for m in loaded if m.startswith(front)] == []
