"""``VerifyRequest``: every option of ``trtcheck.verify`` in one typed, frozen value, checked in one place.

``verify`` takes sixteen options besides the model and its example inputs. Each check used to read whichever it
needed from a long argument list, and a bad value failed wherever it was first used: ``rtol="1e-3"`` inside the
first comparison, after compiling; ``localize_budget=None`` only once a comparison had failed, replacing that failure
with a ``TypeError``. The request checks every value when it is made (``__post_init__``, which
``dataclasses.replace`` runs too), before anything is lowered or run, and says which keyword is wrong and how to fix
it. ``verify``'s keyword API is unchanged: it builds the request from its keywords, with the same defaults.
"""

from __future__ import annotations

import copy
import math
import numbers
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx

from trtcheck.compiler.request import CompileRequest
from trtcheck.dynamo.frontend import check_frontend
from trtcheck.errors import ArgumentTypeError, SettingsError
from trtcheck.partitioning.decisions import Support, support_check_of
from trtcheck.settings import Settings
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.inputs import InputSet, check_input_sets
from trtcheck.verification.judge import Judge


@dataclass(frozen=True, eq=False)  # eq: inputs hold tensors, which == compares elementwise
class VerifyRequest:
    """How to verify a model: ``verify``'s options (its docstring says what each does), validated.

    ``settings`` is the checked ``Settings`` (``None`` gives the defaults), ``num_inputs`` and ``seed`` plain ints (a
    numpy integer is taken); ``resolved_backend`` the backend ``backend`` names here (``"auto"`` resolved), which every
    engine is built on, while ``backend`` stays as asked so the report can say why ``auto`` chose it.
    ``compile_request`` is what it compiles with, and converts again from scratch for determinism (made once: the
    settings checked, the backend and ``torch_executed_ops`` resolved); ``judge`` the one rule every output of this
    request is judged by (``verification.judge``: made from the settings' precision, ``rtol``, ``atol`` and
    ``reference``). ``check_fix``: a failing fp16/bf16 verify checks the ``fp32_nodes`` its report prints by verifying
    once more with them (``fix_unchecked``: the fix printed unchecked, as the check's own verify prints it).
    ``frontend`` (``dynamo.FRONTENDS``) and ``dynamic`` (torch.compile's, for the ``compile`` frontend): how the model
    becomes graphs (``graph_breaks``).
    """

    settings: Settings | None = None
    backend: str = "auto"
    rtol: float | None = None
    atol: float | None = None
    num_inputs: int = 3
    inputs: Sequence[InputSet] | None = None
    allow_fallbacks: bool = False
    lowered: torch.fx.GraphModule | None = None
    support: Support = None
    seed: int = 0
    report_dir: str | os.PathLike | None = None
    name: str | None = None
    dynamic_shapes: Any = None
    reference: bool = True
    localize_budget: float = 60.0
    eager_cache: EagerCache | None = None
    frontend: str = "auto"
    dynamic: bool | None = False
    check_fix: bool = field(init=False, default=True)
    resolved_backend: str = field(init=False, default="")
    compile_request: CompileRequest = field(init=False, default=None)
    judge: Judge = field(init=False, default_factory=Judge)

    def __post_init__(self) -> None:
        for keyword in ("rtol", "atol"):
            _tolerance(keyword, getattr(self, keyword))
        if _integer("num_inputs", self.num_inputs) < 1:
            raise SettingsError(f"verify(num_inputs={self.num_inputs!r}): the input sets compared, the example included, so at "
                             "least 1 (1: the example alone, compared twice)")
        for keyword in ("num_inputs", "seed"):  # a numpy integer made an int: torch.Generator.manual_seed takes no other
            object.__setattr__(self, keyword, _integer(keyword, getattr(self, keyword)))
        if not -(2**63) <= self.seed <= 2**64 - 1:  # torch.Generator.manual_seed's range: it overflowed after the compile
            raise SettingsError(f"verify(seed={self.seed!r}): a seed torch.Generator takes, from -2**63 to 2**64 - 1")
        for keyword in ("allow_fallbacks", "reference"):
            if not isinstance(getattr(self, keyword), bool):
                raise ArgumentTypeError(f"verify({keyword}={getattr(self, keyword)!r}): pass True or False")
        if not _real(self.localize_budget) or not self.localize_budget >= 0:
            raise (TypeError if not _real(self.localize_budget) else ValueError)(
                f"verify(localize_budget={self.localize_budget!r}): seconds a failing comparison may spend localizing "
                "its mismatch, a number >= 0 (0 turns localization off)")
        if self.report_dir is not None and not isinstance(self.report_dir, (str, os.PathLike)):
            raise ArgumentTypeError(f"verify(report_dir={self.report_dir!r}): a directory path (str or os.PathLike) to write the "
                            "repro of a failure into, or None to write none")
        if self.name is not None and not isinstance(self.name, str):
            raise ArgumentTypeError(f"verify(name={self.name!r}): a str naming the report and the repro folder, or None (the "
                            "model's class name)")
        if self.eager_cache is not None and not isinstance(self.eager_cache, EagerCache):
            raise ArgumentTypeError(f"verify(eager_cache={self.eager_cache!r}): a trtcheck.verification.EagerCache shared by the "
                            "calls that verify one model, or None")
        if self.lowered is not None and not isinstance(self.lowered, torch.fx.GraphModule):
            raise ArgumentTypeError(f"verify(lowered={self.lowered!r}): the torch.fx.GraphModule trtcheck.lower(model, "
                            "example_inputs) returned, or None to lower the model here")
        check_frontend(self.frontend, self.dynamic, "verify")
        support_check_of(self.support)  # the partitioner's own rule for what ``support`` may be: it raises TypeError
        if self.inputs is not None:
            check_input_sets(self.inputs)
        if not isinstance(self.backend, str):
            raise ArgumentTypeError(f"verify(backend={self.backend!r}): a backend name: 'onnxruntime', 'tensorrt' or 'auto'")
        compiling = CompileRequest(self.settings, self.backend, support=self.support, lowered=self.lowered,
                                   dynamic_shapes=self.dynamic_shapes)  # an unknown backend: BackendError
        object.__setattr__(self, "compile_request", compiling)
        object.__setattr__(self, "settings", compiling.settings)
        object.__setattr__(self, "resolved_backend", compiling.backend)
        object.__setattr__(self, "judge", Judge.of(self.settings, self.rtol, self.atol, self.reference))

    def judged_by(self, judge: Judge) -> VerifyRequest:
        """This request judging by ``judge``: the quantized rule, chosen once the lowered graph shows quantizers
        (``Judge.for_graph``); everything else as it was checked."""
        if judge is self.judge:
            return self
        changed = copy.copy(self)
        object.__setattr__(changed, "judge", judge)
        return changed

    def fix_unchecked(self) -> VerifyRequest:
        """This request printing the fix of its range findings unchecked (``check_fix`` False): the request that
        checks a fix, which must not check its own."""
        changed = copy.copy(self)
        object.__setattr__(changed, "check_fix", False)
        return changed

    def recorded_options(self) -> dict[str, Any]:
        """The options a repro folder records (``verify.json``) and its ``repro.py`` passes back to ``verify``: those
        that change the verdict on the recorded graph, inputs and settings."""
        return {"dynamic_shapes": self.dynamic_shapes, "rtol": self.rtol, "atol": self.atol,
                "allow_fallbacks": self.allow_fallbacks, "reference": self.reference}


def _real(value: Any) -> bool:
    """A real number that is not a bool: ``float``, ``int``, numpy's scalars (registered as ``numbers.Real``)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _tolerance(keyword: str, value: Any) -> None:
    if value is None:
        return
    if not _real(value):
        raise ArgumentTypeError(f"verify({keyword}={value!r}): a number, or None for the output dtype's default "
                        "(equivalence.default_tolerances)")
    if not math.isfinite(value) or value < 0:  # inf: every finite output would pass
        raise SettingsError(f"verify({keyword}={value!r}): a tolerance is a finite number >= 0, or None for the output "
                         "dtype's default")


def _integer(keyword: str, value: Any) -> int:
    """``value`` as an int (``operator.index``: an int or a numpy integer, never a bool or a float)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"verify({keyword}={value!r}): {keyword} is an int") from None
