"""Repository-wide pytest configuration: hypothesis profiles sized for a 2-core machine.

``ci`` (the default) keeps property tests fast; ``nightly`` is for scheduled runs, ``dev`` for a quick
local loop. Choose one with hypothesis's own option, ``pytest --hypothesis-profile nightly``, or with the
environment variable, ``HYPOTHESIS_PROFILE=nightly pytest``; the option wins when both are given.

Three tiers. The default (README command (2), before every commit: every module, in about five minutes on two
cores) leaves two out, each deselected unless its option or a ``-m`` expression naming its marker asks for it:
``slow`` (tests that take seconds each: every zoo model where the default tier takes one or two, subprocess
runs of downstream projects, the memory and hash-seed checks; ``--slow``) and ``sweep`` (the exhaustive tier:
OpInfo samples in float16, int64 and bool, and seven ops in eight in float32; ``--sweeps``). ``.ci/run`` runs the
default tier, lint, the matrix, the slow tier, then a slice of the sweeps.
"""

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

pytest_plugins = ["pytester"]  # the plugin's own tests (suites/testing) run downstream suites with it

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
PROFILES = {
    "ci": settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True),
    "nightly": settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]),
    "dev": settings(max_examples=20, deadline=None),
}
for _name, _profile in PROFILES.items():
    settings.register_profile(_name, _profile)


def load_profile(name: str, source: str) -> None:
    """Load a registered profile; a usage error naming ``source`` and the known profiles otherwise."""
    try:
        settings.load_profile(name)
    except InvalidArgument:
        raise pytest.UsageError(
            f"{source} names hypothesis profile {name!r}, which is not registered; known: {', '.join(PROFILES)}"
        ) from None


# At import, before any test module is collected: the environment variable, or the default.
_from_environment = os.environ.get(PROFILE_VARIABLE)
load_profile(_from_environment or DEFAULT_PROFILE, f"{PROFILE_VARIABLE}={_from_environment}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """``--hypothesis-profile NAME`` wins over the environment variable, in whatever order things load.

    hypothesis's own plugin loads the option's profile in its ``pytest_configure``, but nothing stops a
    conftest imported after that hook from loading another one. This hook runs first and loads it too;
    hypothesis's plugin then applies ``--hypothesis-verbosity`` and friends on top of it, as usual.
    """
    from trtcheck.testing.pytest_plugin import share_cores_with_other_workers

    share_cores_with_other_workers()  # this repository's own suite compiles models in every xdist worker too
    name = config.getoption("--hypothesis-profile", default=None)
    if name:
        load_profile(name, "--hypothesis-profile")


#: The tiers the default run leaves out: marker -> the option that brings them back.
TIERS = {"slow": "--slow", "sweep": "--sweeps"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow", action="store_true", default=False,
        help="also run the slow tier (tests marked slow: whole-zoo parametrizations, downstream projects run in "
        "subprocesses, memory and hash-seed checks); the default tier keeps a few small models of each",
    )
    parser.addoption(
        "--sweeps", action="store_true", default=False,
        help="also run the exhaustive sweeps (tests marked sweep: OpInfo samples in float16, int64 and bool, and seven "
        "ops in eight in float32); the default tier runs every eighth op's float32 samples",
    )


def _untimed_benchmark(config: pytest.Config, item: pytest.Item) -> bool:
    """A zoo benchmark under xdist, where pytest-benchmark times nothing: it would only compile every model under
    every preset once more, untimed, doubling the main job (README command (1), whose verifications compile them
    already). pytest-benchmark's own test of xdist, mirrored. ``--benchmark-disable`` without xdist is left as
    pytest-benchmark documents it: each benchmark runs once, its checks included."""
    fixtures = getattr(item, "fixturenames", ())
    zoo = item.get_closest_marker("trtcheck") is not None or any(name.startswith("trtcheck_") for name in fixtures)
    if not zoo or "benchmark" not in fixtures:
        return False
    return config.getoption("dist", "no") != "no" or bool(os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default tier (README command (2)) leaves the slow tier and the sweeps out: deselected, and counted by
    pytest as such. A ``-m`` expression naming a tier's marker decides about that tier itself. Zoo benchmarks that
    would time nothing are deselected too (``_untimed_benchmark``)."""
    markexpr = config.option.markexpr or ""
    left_out = [marker for marker, option in TIERS.items() if not config.getoption(option) and marker not in markexpr]
    kept, deselected = [], []
    for item in items:
        leave = any(item.get_closest_marker(marker) for marker in left_out) or _untimed_benchmark(config, item)
        (deselected if leave else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
