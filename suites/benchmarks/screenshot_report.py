"""Screenshot a trtcheck HTML report in headless Chromium, to look at what a reader will see.

    python -m suites.benchmarks.screenshot_report REPORT.html OUT.png [--width 1400 --height 2400]

The report's plots are PNGs embedded in the page; a screenshot is the only check that they render at a
readable size next to the table. Needs Debian's ``chromium`` (``apt-get install -y chromium``). The
browser runs with a throwaway profile and without network features, so it touches nothing but the file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def screenshot(report: Path, output: Path, width: int = 1400, height: int = 2400, timeout: float = 120) -> Path:
    """Render ``report`` headless into ``output`` (PNG); RuntimeError when no browser or no image."""
    browser = find_browser()
    if browser is None:
        raise RuntimeError(f"no browser found (tried {', '.join(BROWSERS)}): apt-get install -y chromium")
    report, output = Path(report).resolve(), Path(output).resolve()
    if not report.is_file():
        raise RuntimeError(f"{report}: no such file")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="trtcheck-chromium-") as profile:
        command = [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--screenshot={output}", f"--window-size={width},{height}",
            "--hide-scrollbars", report.as_uri(),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if not output.is_file() or output.stat().st_size == 0:
        raise RuntimeError(f"{browser} wrote no screenshot (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a report.html written by trtcheck report")
    parser.add_argument("output", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args(argv)
    try:
        print(screenshot(args.report, args.output, args.width, args.height))
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"screenshot_report: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
