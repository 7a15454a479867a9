"""Verification: invariants of a partition (and, with the harness, equivalence against eager)."""

from trtcheck.verification.invariants import Violation, check_invariants

__all__ = ["Violation", "check_invariants"]
