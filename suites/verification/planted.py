"""Planted converter bugs: a registered converter wrapped, through the public registry API, to be wrong on purpose.

Localization and reduction are proven by naming a bug that was put there: ``planted`` makes the converter of one
ATen op wrong for the nodes named (and only those), and restores the registry when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
from collections.abc import Callable, Iterator

import torch

from trtcheck import conversion as converters
from trtcheck.errors import VerificationError

Transform = Callable[[object, torch.fx.Node, str], str]


def off_by(factor: float) -> Transform:
    """The right output times ``factor``: an op off by a little, everywhere."""

    def transform(ctx, node, out):
        return ctx.add("Mul", [out, ctx.constant(factor, node.meta["val"].dtype)])

    return transform


def off_above(threshold: float, factor: float) -> Transform:
    """The right output where it is at most ``threshold``, times ``factor`` above: wrong only on some inputs."""

    def transform(ctx, node, out):
        dtype = node.meta["val"].dtype
        scaled = ctx.add("Mul", [out, ctx.constant(factor, dtype)])
        above = ctx.add("Greater", [out, ctx.constant(threshold, dtype)])
        return ctx.add("Where", [above, scaled, out])

    return transform


@contextlib.contextmanager
def planted(target: torch._ops.OpOverload, nodes: set[str] | None, transform: Transform) -> Iterator[None]:
    """While active, ``target``'s converter gives ``transform``'s wrong output for the nodes named ``nodes``
    (every node of that op when None); the built-in converter converts everything else and is restored after."""
    original = converters.get(target)
    assert original is not None, f"no converter for {target} to plant a bug in"

    def wrong(ctx, node):
        out = original.fn(ctx, node)
        return transform(ctx, node, out) if nodes is None or node.name in nodes else out

    with converters.Snapshot():
        converters.register(target, validator=original.validator, override=True)(wrong)
        yield


def run_repro(folder) -> int:
    """A repro folder's ``repro.py`` run in this process (where a planted converter is still registered), with no
    command-line arguments: its exit code, 1 for the ``VerificationError`` a failing verify folder's script raises."""
    argv = sys.argv
    sys.argv = [str(folder / "repro.py")]
    try:
        runpy.run_path(str(folder / "repro.py"), run_name="__main__")
    except SystemExit as done:
        return done.code
    except VerificationError:
        return 1
    finally:
        sys.argv = argv
    raise AssertionError("repro.py did not exit")
