"""``CompileRequest``: compile's options in one typed, frozen value, checked and resolved once.

Every phase of ``compile`` reads the same options: the front half the settings, the user's ``lowered`` graph,
``dynamic_shapes`` and the ops forced to PyTorch; the engine build the backend and ``strict``; the compiled module
the thread policy. A caller that compiles more than once with the same options (``verify``'s determinism check
converts again from scratch, the precision search compiles once per trial) makes one request and passes it on, so
that the settings are checked, the backend resolved and ``torch_executed_ops`` resolved against PyTorch's op
registry once, not in each phase. (``torch_executed_modules`` is resolved by ``front`` against the lowered graph,
which a request does not have.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch.fx

from trtcheck.engines import resolve_backend
from trtcheck.names import OpMatcher, checked_settings, resolve_ops
from trtcheck.partitioning.decisions import Support
from trtcheck.runtime.threads import check_torch_threads
from trtcheck.settings import Settings


@dataclass(frozen=True, eq=False)  # eq: ``lowered`` is a module, compared by identity
class CompileRequest:
    """How to compile: ``compile``'s options (its docstring says what each does), checked when made.

    ``settings`` is the checked ``Settings``; ``backend`` the resolved backend name (``"auto"`` resolved: a backend
    missing here fails when the request is made, before any work); ``kept_ops`` the ``torch_executed_ops``
    resolved, which lowering keeps whole and partitioning forces to PyTorch."""

    settings: Settings | None = None
    backend: str = "auto"
    support: Support = None
    strict: bool = False
    check_shapes: bool = True
    lowered: torch.fx.GraphModule | None = None
    dynamic_shapes: Any = None
    torch_threads: int | str | None = "auto"
    kept_ops: OpMatcher = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        check_torch_threads(self.torch_threads)  # before any work: a bad value is the caller's mistake, not the model's
        settings = checked_settings(self.settings)
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "backend", resolve_backend(self.backend))
        object.__setattr__(self, "kept_ops", resolve_ops(settings.torch_executed_ops))


def request_of(settings: Settings | CompileRequest | None = None, **options: Any) -> CompileRequest:
    """``settings`` when it is a request already (``options`` then change it), else a request made of it and
    ``options``: the phases take either, so that a caller holding a request passes it on unchecked again."""
    if isinstance(settings, CompileRequest):
        return replace(settings, **options) if options else settings  # replace checks the changed request again
    return CompileRequest(settings, **options)
