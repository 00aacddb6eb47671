"""KernelCourt's evaluator: sandboxed compile, verify, integrity checks, profile and reward.

No Django here: this package runs on a bare GPU node that has only torch (+ ray where installed).
"""

from .schema import EvalRequest, EvalResult, Finding, source_hash
from .settings import EvaluatorSettings

__all__ = ["EvalRequest", "EvalResult", "EvaluatorSettings", "Finding", "evaluate", "source_hash"]


def evaluate(request: EvalRequest, settings: EvaluatorSettings | None = None) -> EvalResult:
    """Evaluate one candidate kernel (see gpu_workers.evaluator); ``settings`` default to this
    process's (``gpu_workers.settings.current()``)."""
    from .evaluator import evaluate as _evaluate

    return _evaluate(request, settings)
