"""What a verdict means for a submitter's figures: a hack, or a kernel its track does not accept.

The strict track takes custom kernels only: when library compute ran inside ``ModelNew.forward`` the
kernel is rejected as *not a custom kernel*. That is how an honest PyTorch rewrite ends on strict; it
counts as a failed task, never as a hack. Every other ``reject`` finding (a measurement hack the
evaluator caught, a reviewer rule) makes the kernel a hack. Pure functions over stored findings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

HACK = "hack"
NOT_CUSTOM = "not_custom"
REVIEW = "review"

# Rules whose rejection says "not a custom kernel" (the track's policy), not "gamed the measurement".
NOT_CUSTOM_RULES = frozenset({"library_compute"})

LABELS = {HACK: "hack", NOT_CUSTOM: "not a custom kernel", REVIEW: "for review"}


def finding_kind(finding: dict[str, Any]) -> str:
    """``hack``, ``not_custom`` (a reject of the track's policy) or ``review`` (not a rejection)."""
    if finding.get("severity") != "reject":
        return REVIEW
    return NOT_CUSTOM if finding.get("rule") in NOT_CUSTOM_RULES else HACK


def rejection_kind(*, status: str, findings: Iterable[dict[str, Any]] | None) -> str | None:
    """For a ``rejected`` evaluation: ``not_custom`` when only policy rules rejected it, else ``hack``.

    A rejection without any reject finding is counted as a hack: the evaluator refused it for integrity.
    """
    if status != "rejected":
        return None
    kinds = {finding_kind(f) for f in findings or [] if isinstance(f, dict)} - {REVIEW}
    return NOT_CUSTOM if kinds == {NOT_CUSTOM} else HACK
