"""Evaluator workers: the pools that run evaluations side by side (``pool``: LocalPool, RayPool) and
a worker's start-up before its first evaluation (``warmup``).
"""
