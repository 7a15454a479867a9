"""The installed names: every package folder is shipped, and the zoo cannot collide with a user's ``models``.

Many ML repositories have a top-level ``models`` package. When the zoo installed under that name, a
downstream project's own ``models/`` shadowed it (or the reverse) and ``pytest --trtcheck`` broke there.
The zoo keeps its ``models/`` folder in this repository but installs as ``trtcheck_zoo``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _declared_packages() -> tuple[list[str], dict[str, str]]:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return setuptools["packages"], setuptools.get("package-dir", {})


def _package_folders() -> set[str]:
    found = set()
    for init in (ROOT / "trtcheck").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_every_trtcheck_package_folder_is_declared():
    """The package list is explicit (find cannot rename models/), so a new subpackage must be added to it."""
    packages, _ = _declared_packages()
    missing = _package_folders() - set(packages)
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"


def test_the_zoo_installs_as_trtcheck_zoo_from_the_models_folder():
    packages, package_dir = _declared_packages()
    assert "trtcheck_zoo" in packages and "models" not in packages
    assert package_dir == {"trtcheck_zoo": "models"}


def test_no_trtcheck_module_imports_the_zoo_as_models():
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("trtcheck", "models", "suites")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__).resolve()
        and any(line.strip().startswith(("import models", "from models")) for line in path.read_text().splitlines())
    ]
    assert not offenders, f"import the zoo as trtcheck_zoo: {offenders}"


DOWNSTREAM_MODELS = '''
"""A downstream project's own models package, as many ML repositories have."""
OWNER = "downstream"

def names():
    return ["not-the-zoo"]
'''

DOWNSTREAM_TEST = '''
import models
import torch


def test_their_models_package_is_theirs():
    assert models.OWNER == "downstream"


def test_their_model_verifies(trtcheck_verify):
    trtcheck_verify(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), (torch.randn(2, 4),))


def test_the_zoo_verifies_beside_them(trtcheck_model, trtcheck_lowered, trtcheck_verify):
    model, example_inputs = trtcheck_model
    trtcheck_verify(model, example_inputs, lowered=trtcheck_lowered)
'''


@pytest.mark.slow
def test_pytest_trtcheck_runs_in_a_project_with_its_own_models_package(tmp_path):
    """A real downstream checkout: its ``models`` package next to its tests, the zoo selected by name."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text(DOWNSTREAM_MODELS)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_downstream.py").write_text(DOWNSTREAM_TEST)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.pytest.ini_options]
        pythonpath = ["."]
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--trtcheck",
         "--trtcheck-models", "seed_lgamma", "--trtcheck-settings", "min_block_size_1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # their package, their model and the zoo's model (imported by the plugin) in one process
    assert "3 passed" in output, output
