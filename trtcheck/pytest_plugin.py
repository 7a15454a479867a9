"""The pytest plugin (registered through the ``pytest11`` entry point): options and markers only.

``--trtcheck`` turns the verification matrix on; tests marked ``trtcheck`` are skipped without it, since
they compile whole models and take minutes. The work itself lives in the library (``trtcheck``).
"""

from __future__ import annotations

import pytest

MARKER = "trtcheck"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trtcheck", "trtcheck: TensorRT/PyTorch partition verification")
    group.addoption(
        "--trtcheck",
        action="store_true",
        default=False,
        help="run the trtcheck verification matrix (tests marked 'trtcheck')",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: part of the verification matrix; runs only with --trtcheck")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("trtcheck"):
        return
    skip = pytest.mark.skip(reason="trtcheck verification matrix: run with --trtcheck")
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(skip)
