"""An installed plugin is silent in a project that does not use it: no warning, also under ``filterwarnings = error``.

pytest rewrites the asserts of a plugin's modules when it imports them itself; the plugin once imported its fixtures
module first, so every pytest run in an environment with trtcheck installed ended with a PytestAssertRewriteWarning,
and a project treating warnings as errors could not start pytest at all (exit 3)."""

from __future__ import annotations

from suites.testing.downstream import run_pytest


def test_a_project_with_filterwarnings_error_runs_and_hears_nothing_from_trtcheck(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    done = run_pytest(tmp_path, "-q")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "1 passed" in output and "warning" not in output.lower(), output[-3000:]
