"""Verification: invariants of a partition, equivalence against eager, and repros of failures."""

from trtcheck.errors import VerificationError
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.equivalence import Comparison, OutputComparison, compare_outputs, default_tolerances
from trtcheck.verification.invariants import Violation, check_invariants
from trtcheck.verification.report import VerificationReport
from trtcheck.verification.request import VerifyRequest
from trtcheck.verification.verify import verify, verify_request

__all__ = [
    "Comparison",
    "EagerCache",
    "OutputComparison",
    "VerificationError",
    "VerificationReport",
    "VerifyRequest",
    "Violation",
    "check_invariants",
    "compare_outputs",
    "default_tolerances",
    "verify",
    "verify_request",
]
