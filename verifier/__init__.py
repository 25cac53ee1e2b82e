"""Quality gates over a conversation's outcome: the ``Verifier`` protocol and verifiers to plug in."""

from verifier._command import CommandVerifier
from verifier._core import Result, Status, Verifier, build_report, check_verifiers, failed, passed, run_all
from verifier._function import Check, FunctionVerifier
from verifier._judge import JudgeVerifier, Verdict
from verifier._schema import SchemaVerifier

__all__ = [
    "Check",
    "CommandVerifier",
    "FunctionVerifier",
    "JudgeVerifier",
    "Result",
    "SchemaVerifier",
    "Status",
    "Verdict",
    "Verifier",
    "build_report",
    "check_verifiers",
    "failed",
    "passed",
    "run_all",
]
