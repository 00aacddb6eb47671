"""KernelCourt's evaluator: sandboxed compile, verify, integrity checks, profile and reward.

No Django here: this package runs on a bare GPU node that has only torch (+ ray where installed).
"""

from .schema import EvalRequest, EvalResult, Finding, source_hash

__all__ = ["EvalRequest", "EvalResult", "Finding", "evaluate", "source_hash"]


def evaluate(request: EvalRequest) -> EvalResult:
    """Evaluate one candidate kernel (see gpu_workers.evaluator)."""
    from .evaluator import evaluate as _evaluate

    return _evaluate(request)
