"""The red-team harness: an OpenAI-compatible model attacks the evaluator, family by family, and every
candidate that earns a reward is kept as a quarantined regression case (``python -m agent redteam``, also
``python -m gpu_workers redteam``)."""

from agent.redteam.families import FAMILIES, Family
from agent.redteam.harness import AttackConfig, AttackReport, run_attack

__all__ = ["FAMILIES", "AttackConfig", "AttackReport", "Family", "run_attack"]
