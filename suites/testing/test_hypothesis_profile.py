"""The repository's hypothesis profiles: chosen by ``--hypothesis-profile`` or by ``HYPOTHESIS_PROFILE``.

Each case runs a fresh pytest process (``runpytest_subprocess``): the active profile is global state of
the hypothesis module, which an in-process run would leave changed for the rest of this session. The
process gets the repository's real root conftest.py, the file under test, copied next to a test that
prints what ``hypothesis.settings()`` resolves to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

SHOW = """
from hypothesis import settings


def test_show():
    print(f"max_examples={settings().max_examples} profile={settings.get_current_profile_name()}")
"""


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_show=SHOW)

    def run(*args: str, env: str | None = None):
        if env is not None:
            monkeypatch.setenv("HYPOTHESIS_PROFILE", env)
        # Without trtcheck's plugin (and so without importing torch): only hypothesis is under test.
        return pytester.runpytest_subprocess("-s", "-p", "no:trtcheck", "-p", "no:cacheprovider", *args)

    return run


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), None, "max_examples=60 profile=ci"),
        (("--hypothesis-profile", "dev"), None, "max_examples=20 profile=dev"),
        ((), "nightly", "max_examples=2000 profile=nightly"),
        (("--hypothesis-profile", "dev"), "nightly", "max_examples=20 profile=dev"),  # the option wins
    ],
    ids=["default", "option", "environment", "option-over-environment"],
)
@pytest.mark.slow
def test_the_profile_comes_from_the_option_then_the_environment(run, args, env, expected):
    result = run(*args, env=env)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*{expected}*"])


def test_an_unknown_profile_in_the_environment_names_the_known_ones(run):
    result = run(env="weekly")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*HYPOTHESIS_PROFILE=weekly names hypothesis profile 'weekly'*known: ci, nightly, dev*"])
