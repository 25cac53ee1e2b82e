"""Quality gates over a conversation's outcome: the ``Verifier`` protocol and verifiers to plug in."""

from verifier._command import CommandVerifier
from verifier._core import Result, Status, Verifier, build_report, check_verifiers, failed, passed, run_all
from verifier._function import Check, FunctionVerifier
from verifier._guards import Guard, MaxLength, Passage, TextCheck, Where, mask, passages
from verifier._injection import INJECTION_PATTERNS, NoInjection
from verifier._judge import JudgeVerifier, Verdict
from verifier._privacy import SECRET_PATTERNS, NoPII, NoSecrets
from verifier._schema import SchemaVerifier

__all__ = [
    "Check",
    "CommandVerifier",
    "FunctionVerifier",
    "Guard",
    "INJECTION_PATTERNS",
    "JudgeVerifier",
    "MaxLength",
    "NoInjection",
    "NoPII",
    "NoSecrets",
    "Passage",
    "Result",
    "SECRET_PATTERNS",
    "SchemaVerifier",
    "Status",
    "TextCheck",
    "Verdict",
    "Verifier",
    "Where",
    "build_report",
    "check_verifiers",
    "failed",
    "mask",
    "passages",
    "passed",
    "run_all",
]
