"""Where a node of a lowered graph came from in the user's code: the modules enclosing it, and its file and line.

torch.export keeps both in a node's ``meta`` (``nn_module_stack``, ``stack_trace``); ``node_source`` says them in one
phrase, and ``from_source`` is how every printout that names a node (a culprit, a reduced model, a fallback reason, the
HTML page) puts it. Resolving ``Settings``' module names against these stacks is ``trtcheck.names``'.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
from typing import Any

import torch
import torch.fx


def module_stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """The ``(qualified path, class qualname)`` of every module enclosing ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    result = []
    for path, cls in stack.values():
        result.append((path, class_name(cls)))
    return result


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_MODELOPT = importlib.util.find_spec("modelopt")  # found, not imported: a quantizer's frames are ModelOpt's own
_LIBRARY_DIRS = tuple(
    [str(pathlib.Path(torch.__file__).resolve().parent) + os.sep]
    + [str(pathlib.Path(place).resolve()) + os.sep for place in (_MODELOPT.submodule_search_locations or [] if _MODELOPT else [])]
)
"""Code no node's source line is taken from: PyTorch's, and NVIDIA ModelOpt's (a quantizer's line is the user's call
of the layer it quantizes)."""


def node_source(node: torch.fx.Node) -> str:
    """Where in the user's code ``node`` came from, for a culprit or a fallback reason: the innermost module's path
    and class (``encoder.layer.3.attention (BertSelfAttention)``; ``the model itself`` at the top level) and the file
    and line of the innermost frame of its ``stack_trace`` outside PyTorch (``model.py:42``), where torch.export kept
    them. ``""`` when it kept neither (a node trtcheck made, a branch graph)."""
    parts = []
    stack = module_stack(node)
    if stack:
        path, cls = stack[-1]
        parts.append(f"{path or 'the model itself'} ({cls.rpartition('.')[2]})")
    trace = node.meta.get("stack_trace")
    if isinstance(trace, str):
        frames = [(match["file"], match["line"]) for match in _FRAME.finditer(trace)]
        users = [frame for frame in frames if not _in_library(frame[0])]
        if users:
            file, line = users[-1]
            parts.append(f"{file}:{line}")
    return ", ".join(parts)


def from_source(source: str) -> str:
    """``from layers.1 (Block), model.py:23``: how a culprit or a node names where in the user's code it came from,
    ``source`` being ``node_source``'s (non-empty) answer. Localization's culprit, reduction's culprits, the HTML page
    and ``Partition``'s summary all say it so."""
    return f"from {source}"


def _in_library(file: str) -> bool:
    """A frame of PyTorch's own code, or of the code torch.fx generates for a GraphModule's forward (``<eval_with_key>.N``:
    a branch graph of ``torch.cond`` re-traced, never a line the user wrote)."""
    if file.startswith("<eval_with_key>"):
        return True
    try:
        resolved = str(pathlib.Path(file).resolve())
    except (OSError, ValueError):
        return False
    return resolved.startswith(_LIBRARY_DIRS)


def class_name(cls: Any) -> str:
    """A module class as ``nn_module_stack`` names it: ``module.QualName`` (a name torch.export kept as a string stays one)."""
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
