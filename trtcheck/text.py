"""Small wording helpers every printout shares, so a count reads "1 segment" and "2 segments" everywhere."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """``plural(1, "segment")`` -> ``"1 segment"``; ``plural(2, "segment")`` -> ``"2 segments"``.

    ``many`` is the plural when adding an "s" is wrong (``plural(n, "branch graph", "branch graphs")`` needs
    none, ``plural(n, "boundary", "boundaries")`` does).
    """
    return f"{count} {word if count == 1 else (many or word + 's')}"
