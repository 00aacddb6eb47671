"""RL training for kernel-writing policies: rewards, credit assignment, GRPO/PPO, staged recipes,
rollouts against the evaluator, checkpoints and metrics. No Django here.

Entry points: ``training.runner.run_training`` (library), ``python -m training run`` (command line).
See docs/training.md.
"""
