"""The documentation's own checks (README.md and docs/*.md): fast, plain pytest, no torch.

1. Every relative link resolves: to a file or folder that exists and, with an ``#anchor`` into a Markdown file, to a
   heading of that file (GitHub's anchors, which mkdocs' agree with for the headings used here).
2. No tracked text file names a development machine's path (a path starting at the work, temporary, root or home
   folder of the machine it was written on): a command in the docs must run from a clean checkout.
3. The README stays short: at most ``README_MAX_LINES`` lines.
4. The README's first two shell commands are the main job (install, ``pytest --trtcheck``) and the test command
   ``.ci/run`` runs (install, the default tier), CI's reporting flags aside.
5. trtcheck's code says what it does and why, not how it came to be: no issue numbers (``issue 43``: say the rule or
   design instead), no "the seed" (Torch-TensorRT's partitioning design, defined in docs/partitioning.md), and no
   docstring longer than ``DOCSTRING_MAX_LINES`` lines (measurements belong in docs/performance.md).

Each check is a function over text, so the tests at the bottom run it on crafted input too: a check that cannot
fail proves nothing.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
README_MAX_LINES = 250

# ---------------------------------------------------------------------------------------------------------------
# Markdown: fenced blocks, inline code, links, headings

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """Every fenced code block: (info string's first word, body, line number of the opening fence)."""
    blocks: list[tuple[str, str, int]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info, start = opening.group(1), opening.group(2).lower(), index + 1
        body: list[str] = []
        index += 1
        while index < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[index]):
            body.append(lines[index])
            index += 1
        blocks.append((info, "\n".join(body), start))
        index += 1
    return blocks


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced blocks, inline code blanked: what Markdown renders as links and headings."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            continue
        if fence is not None:
            if re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
                fence = None
            continue
        yield number, _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline and reference-style link and image outside code."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        found += [(number, match.group(1)) for match in _INLINE_LINK.finditer(line)]
        reference = _REFERENCE_LINK.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but ``-`` and ``_`` removed, spaces to
    hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown file defines: its headings' (a repeated one numbered, as GitHub does) and HTML ids."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    raw_lines = text.splitlines()
    for number, line in prose_lines(text):
        heading = _HEADING.match(raw_lines[number - 1])
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(_HTML_ANCHOR.findall(line))
    return found


def broken_links(path: Path, text: str, read: Callable[[Path], str] = lambda p: p.read_text(encoding="utf-8")) -> list[str]:
    """Every relative link of ``path`` (whose text is ``text``) that does not resolve: no such file or folder, or an
    ``#anchor`` that no heading of the Markdown file it points into defines."""
    problems: list[str] = []
    for number, target in links(text):
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue  # a URL (https:, mailto:): not this repository's to check
        location, _, anchor = target.partition("#")
        linked = path if not location else (path.parent / location).resolve()
        where = f"{path.name}:{number}: {target}"
        if location and not linked.exists():
            problems.append(f"{where}: no such file or folder")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(text if linked == path else read(linked)):
            problems.append(f"{where}: no heading with anchor #{anchor} in {linked.name}")
    return problems


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


# ---------------------------------------------------------------------------------------------------------------
# Development machines' paths

# A path that starts at one of these folders, not one inside a relative path or a URL (``a/tmp/b``,
# ``https://host/home/``, ``~/work/``): what is before it may not be a name character, a dot or a tilde.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|tmp|root|home)/")
TEXT_SUFFIXES = (".md", ".py", ".toml", ".yml", ".yaml", ".txt", ".cfg")


def machine_paths(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line naming a development machine's path."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1) if MACHINE_PATH.search(line)]


def tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"git ls-files failed in {ROOT.name} ({error}): the tracked files are unknown")
    names = [name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name]
    return [ROOT / name for name in names if name.endswith(TEXT_SUFFIXES) or name.startswith(".ci/")]


# ---------------------------------------------------------------------------------------------------------------
# The README's commands against .ci/run's

_SHELLS = {"bash", "sh", "shell", "console", "zsh"}
CI_README_COMMENT = "# The README's test command"  # .ci/run's comment on the line that runs README command (2)
_REPORTING = re.compile(r"^(?:-q|--quiet|--durations=\d+)$")  # how a run reports, not what it runs


def shell_commands(text: str) -> list[str]:
    """Every command of the shell blocks of ``text``, in order: comments, blank lines and output skipped (in a
    ``console`` block only ``$ `` lines are commands), continuation lines joined."""
    commands: list[str] = []
    for info, body, _ in fenced_blocks(text):
        if info not in _SHELLS:
            continue
        pending = ""
        for line in body.splitlines():
            stripped = line.strip()
            if info == "console" and not pending:
                if not stripped.startswith("$ "):
                    continue
                stripped = stripped[2:]
            stripped = stripped.removeprefix("$ ")
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            pending += stripped
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            commands.append(re.sub(r"\s+#.*$", "", pending).strip())
            pending = ""
    return commands


def words(command: str) -> list[str]:
    """The command's words as the shell splits them, reporting flags (``-q``, ``--durations=N``) left out."""
    return [word for word in shlex.split(command, comments=True) if not _REPORTING.match(word)]


def ci_line(script: str, comment: str) -> str:
    """The first command line of ``script`` after the comment line that starts with ``comment``."""
    lines = script.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith(comment):
            for following in lines[index + 1:]:
                if following.strip() and not following.lstrip().startswith("#"):
                    return following.strip()
    raise AssertionError(f".ci/run has no command after a comment {comment!r}: how it marks the README's command changed")


def readme_command_problems(readme: str, ci_script: str) -> list[str]:
    """What is wrong with the README's first two commands: (1) must install and run the main job, ``.ci/run``'s
    ``pytest --trtcheck`` line, (2) must install and run ``.ci/run``'s README test command."""
    blocks = fenced_blocks(readme)
    if not blocks or blocks[0][0] not in _SHELLS:
        return ["the README's first code block is not its shell commands"]
    commands = shell_commands(readme)
    if len(commands) < 2:
        return [f"the README has {len(commands)} shell commands; its first two must be the main job and the tests"]
    main, tests = (words(command) for command in commands[:2])
    problems = []
    ci_tests = words(ci_line(ci_script, CI_README_COMMENT))
    ci_main = next((words(line) for line in ci_script.splitlines() if line.strip().startswith("pytest --trtcheck")), None)
    if "pytest" not in ci_tests or "install" not in ci_tests:
        problems.append(f".ci/run's README test command does not install and run pytest: {' '.join(ci_tests)}")
    if tests[-len(ci_tests):] != ci_tests:
        problems.append(f"README command (2) is {commands[1]!r}; .ci/run runs {' '.join(ci_tests)!r}")
    install = ci_tests[:ci_tests.index("&&") + 1] if "&&" in ci_tests else []
    if ci_main is None:
        problems.append(".ci/run runs no `pytest --trtcheck` line: the main job")
    elif main[-len(ci_main):] != ci_main or "--trtcheck" not in main:
        problems.append(f"README command (1) is {commands[0]!r}; .ci/run's main job is {' '.join(ci_main)!r}")
    elif install and main[-len(ci_main) - len(install):-len(ci_main)] != install:
        problems.append(f"README command (1) does not install as (2) does ({' '.join(install[:-1])!r}) before the main job")
    return problems


# ---------------------------------------------------------------------------------------------------------------
# Lab notes in trtcheck's code

PACKAGE = ROOT / "trtcheck"
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)  # "issue 43", "issue #43", "issues 42 and 43"
THE_SEED = re.compile(r"\bthe\s+seed\b", re.IGNORECASE)
DOCSTRING_MAX_LINES = 40
LAB_NOTE_FIXES = (
    "say the rule or design an issue number stands for, so that a newcomer can follow the sentence; "
    "for \"the seed\" say Torch-TensorRT's partitioning design (docs/partitioning.md defines it); "
    f"keep docstrings to {DOCSTRING_MAX_LINES} lines: move measurements to docs/performance.md and link it"
)


def lab_notes(text: str) -> list[tuple[int, str]]:
    """(line number, what) of every issue number, every "the seed" and every docstring (module, class, function)
    longer than ``DOCSTRING_MAX_LINES`` lines in the Python source ``text``."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        found += [(number, f"issue number {match.group(0)!r}") for match in ISSUE_NUMBER.finditer(line)]
        found += [(number, f"{match.group(0)!r}: an undefined name") for match in THE_SEED.finditer(line)]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node):
            literal = node.body[0]
            lines = (literal.end_lineno or literal.lineno) - literal.lineno + 1
            if lines > DOCSTRING_MAX_LINES:
                name = getattr(node, "name", "the module")
                found.append((literal.lineno, f"docstring of {name}: {lines} lines (at most {DOCSTRING_MAX_LINES})"))
    return sorted(found)


# ---------------------------------------------------------------------------------------------------------------
# The checks, on this repository

def test_every_relative_link_resolves():
    problems = [problem for path in markdown_files() for problem in broken_links(path, path.read_text(encoding="utf-8"))]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_no_tracked_text_file_names_a_development_machines_path():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in tracked_text_files()
        if path.is_file()
        for number, line in machine_paths(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "paths of a development machine (write commands that run from a clean checkout):\n" + "\n".join(found)


def test_trtchecks_code_carries_no_lab_notes():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, what in lab_notes(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"lab notes in trtcheck's code ({LAB_NOTE_FIXES}):\n" + "\n".join(found)


def test_the_readme_is_short():
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README.md has {count} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_the_readmes_first_two_commands_are_the_main_job_and_the_ones_ci_runs():
    problems = readme_command_problems(README.read_text(encoding="utf-8"), CI_RUN.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# The checks catch what they are for

def test_a_broken_link_and_a_missing_anchor_are_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Its `first` section: here\n")
    readme = tmp_path / "README.md"
    text = (
        "# Title\n\nSee [the page](docs/page.md), [a section](docs/page.md#its-first-section-here), [top](#title),\n"
        "[gone](docs/gone.md), [no such section](docs/page.md#nowhere), [web](https://example.com/x.md),\n"
        "`[in code](docs/code.md)`\n\n```\n[in a block](docs/block.md)\n```\n\n[ref]: docs/missing.md\n"
    )
    problems = broken_links(readme, text)
    assert [problem.split(": ")[1] for problem in problems] == ["docs/gone.md", "docs/page.md#nowhere", "docs/missing.md"]


def test_anchors_follow_githubs_rules():
    text = "# The `trtcheck` command\n## PyTorch's threads\n## Tensor-only boundaries and min_block_size\n## Notes\n## Notes\n"
    assert anchors(text) == {
        "the-trtcheck-command", "pytorchs-threads", "tensor-only-boundaries-and-min_block_size", "notes", "notes-1",
    }


def test_a_machine_path_is_caught_and_urls_and_relative_paths_are_not():
    slash = "/"
    bad = [f"git clone {slash}work{slash}main", f"TRTCHECK_VENV={slash}tmp{slash}venv", f"'{slash}root{slash}.cache'",
           f"({slash}home{slash}me)"]
    good = [f"https://example.com{slash}home{slash}x", f"suites{slash}tmp{slash}x", f"~{slash}work{slash}x",
            f"$HOME{slash}tmp{slash}x", "tempfile.mkdtemp()", f"{slash}tmpfile"]
    assert [line for _, line in machine_paths("\n".join(bad + good))] == bad


def test_lab_notes_are_caught_and_plain_words_are_not():
    at_limit = "\n".join(["line"] * DOCSTRING_MAX_LINES)
    long_body = at_limit + "\nline"
    text = (
        '"""A module."""\n'
        "# issue 43 said so\n"
        "x = 1  # (issue #42, item 1); issues 42 and 43\n"
        "# as The Seed prints it\n"
        f'def f():\n    """{long_body}"""\n'
        f'class C:\n    """Short."""\n    def g(self):\n        """{at_limit}"""\n'
        "# an issue with 3 parts; a seed of 0; the seeds; reissue 4; tissues 5; seed the RNG\n"
    )
    assert [(number, what.split(" ")[0]) for number, what in lab_notes(text)] == [
        (2, "issue"), (3, "issue"), (3, "issue"), (4, "'The"), (6, "docstring"),
    ]
    assert lab_notes(f'"""{at_limit}"""\n') == []  # exactly the limit: a method's and a module's docstring pass


def test_the_readme_line_limit_is_what_the_test_reads():
    assert len(("line\n" * (README_MAX_LINES + 1)).splitlines()) > README_MAX_LINES


CI = """#!/usr/bin/env bash
# The README's test command (the default tier; the slowest tests printed):
pip install -q -e '.[dev]' && pytest -q -n 2 --durations=25
# The main job:
pytest --trtcheck -m trtcheck -n 2 suites/matrix -q --durations=10
"""
COMMANDS = """```bash
# (1) the main job
python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && pytest --trtcheck -m trtcheck -n 2 suites/matrix

# (2) the tests
python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && pytest -q -n 2
```
"""


def test_the_readmes_commands_are_checked_against_ci():
    assert readme_command_problems("# T\n\n" + COMMANDS, CI) == []
    both_tests = COMMANDS.replace("pytest --trtcheck -m trtcheck -n 2 suites/matrix", "pytest -q -n 2")
    assert readme_command_problems("# T\n\n" + both_tests, CI)  # (1) is not the main job
    assert readme_command_problems("# T\n\n" + COMMANDS.replace("pytest -q -n 2\n", "pytest -q -n 4\n"), CI)
    assert readme_command_problems("# T\n\n```python\nprint()\n```\n\n" + COMMANDS, CI) == [
        "the README's first code block is not its shell commands"
    ]
    assert readme_command_problems("# T\n\n" + COMMANDS.replace("pip install -e '.[dev]' && pytest --trtcheck",
                                                                "pytest --trtcheck"), CI)
