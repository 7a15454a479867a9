"""Every exception and warning trtcheck defines, in one place.

Errors a user can act on derive from ``TrtcheckError``: each message names the problem and the fix, so a
user never has to read an internal traceback. A few also derive from the builtin a caller would expect
(``ValueError`` for a bad value, ``AssertionError`` for a failed check, so pytest reports a failure).

``ConversionError``, ``EngineBuildError`` and ``GraphMustChange`` are internal: trtcheck raises and catches
them itself (a segment that fails to convert or build falls back to PyTorch and is reported in
``Partition.fallbacks``), so they are plain exceptions, never shown to a user as the reason a call failed.
"""

from __future__ import annotations

from typing import Any


class TrtcheckError(Exception):
    """Base class of every error trtcheck raises deliberately."""


class SettingsError(TrtcheckError, ValueError):
    """A ``Settings`` value is invalid: an unknown op or module name, a min_block_size below 1, ..."""


class UnknownSettingError(SettingsError, TypeError):
    """A misspelled ``Settings(...)`` keyword: a ``SettingsError``, and still the ``TypeError`` Python raises."""


class UnmatchedOpError(SettingsError):
    """An op of ``torch_executed_ops`` matches no node of the lowered graph: it would force nothing. (The pytest
    plugin's presets are generic, so there it means "this preset does not apply to this model".) ``unmatched``: the
    entries, as written, so that a model in several graphs (torch.compile's) can ask it of the model as a whole."""

    def __init__(self, message: str, unmatched: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.unmatched = tuple(unmatched)


class ArgumentTypeError(SettingsError, TypeError):
    """An argument of the public API (``verify``'s ``seed``, ``report_dir``, ...) of a type it does not take."""


class LoweringError(TrtcheckError):
    """The model could not be lowered to a core-ATen ``torch.fx`` graph."""

    torch_log: str = ""
    """What torch logged while the failed ``torch.export`` ran (tracebacks of fake-tensor meta failures...),
    kept off stderr since the message already says what failed; ``trtcheck ... --verbose`` prints it."""


class ExportRefusedError(LoweringError):
    """torch.export could not trace the model itself (data-dependent control flow, Python it cannot capture), its
    inputs being fine: ``frontend="auto"`` then verifies the model through torch.compile's graphs instead."""


class DynamicShapesError(LoweringError, ValueError):
    """``dynamic_shapes`` does not fit the inputs (a dim the input lacks, a name forward does not take, a value
    that is not a ``torch.export.Dim``): refused before torch.export runs, so the model is never blamed."""


class PartitionError(TrtcheckError):
    """Partitioning could not satisfy the settings (e.g. ``require_full_compilation``)."""


class ShapeMismatchError(TrtcheckError):
    """A segment produced a value whose shape or dtype differs from the graph's metadata."""


class CompilationError(TrtcheckError):
    """With ``strict=True``: a TensorRT segment could not be converted or built."""


class BackendError(TrtcheckError, ValueError):
    """An engine backend name is unknown, or names a backend that cannot run on this machine."""


class BackendUnavailableError(BackendError):
    """An explicitly requested backend is missing here (its package, or a CUDA device).

    Raised before anything is lowered or converted: a run that silently fell back to PyTorch everywhere
    would pass verification having converted nothing.
    """


class InputMismatchError(TrtcheckError, ValueError):
    """The compiled module was called with inputs that differ from the example inputs it was compiled for."""


class EngineRuntimeError(TrtcheckError, RuntimeError):
    """A built engine failed while running; the message names the segment and the backend."""


class NondeterministicModelError(TrtcheckError, AssertionError):
    """Eager PyTorch disagrees with itself on identical calls, so no comparison with it can mean anything."""


class InputDomainError(TrtcheckError, ValueError):
    """Eager PyTorch itself failed on an input set trtcheck generated: the model's inputs are constrained."""


class VerificationError(TrtcheckError, AssertionError):
    """A stitched module differs from eager, or its partition breaks an invariant; ``.report`` says how."""

    def __init__(self, report: Any) -> None:
        super().__init__(str(report))
        self.report = report  # a trtcheck.verification.VerificationReport


class ModelLoadError(TrtcheckError, ValueError):
    """A model named on the command line could not be loaded; the message says what was wrong and how to fix it."""


class ReportError(TrtcheckError):
    """A benchmark file cannot be reported on: unreadable, not pytest-benchmark JSON, or no trtcheck data."""


class UnsupportedDtypeError(TypeError):
    """A dtype with no equivalent in the requested world. The message names it and what is supported."""


class ConversionError(Exception):
    """A node of a segment could not be converted to ONNX (no converter, or its validator said no). Internal:
    the segment falls back to PyTorch and ``Partition.fallbacks`` reports it."""


class EngineBuildError(Exception):
    """An engine could not be built. The message names the backend, what failed and the fix. Internal when
    compiling (the segment falls back); raised as it is by ``trtcheck.engines.build_engine`` called directly."""


class ParserRefusedError(EngineBuildError):
    """TensorRT's ONNX parser refused a segment's model: the segment falls back to PyTorch.

    ``errors`` are the parser's own messages (``str(parser.get_error(i))``); ``unsupported_nodes`` the ONNX
    nodes ``supports_model_v2`` placed in unsupported subgraphs, as ``(index, op_type, outputs)``.
    """

    def __init__(self, message: str, errors: Any = (), unsupported_nodes: Any = ()) -> None:
        super().__init__(message)
        self.errors = tuple(errors)
        self.unsupported_nodes = tuple(unsupported_nodes)


class GraphMustChange(Exception):
    """Internal to partitioning: the copy rule must insert nodes into a graph the caller does not own, so the
    caller copies the graph and retries."""


class ReproWriteWarning(UserWarning):
    """A repro could not be written (an unwritable report directory, a full disk); the check's result stands.

    ``folder`` and ``reason`` let a front end say it in its own words, naming its own option (the ``trtcheck``
    command's ``--report-dir``, not pytest's ``--trtcheck-report``).
    """

    def __init__(self, message: str, folder: object = None, reason: str = "") -> None:
        super().__init__(message)
        self.folder = folder
        self.reason = reason
