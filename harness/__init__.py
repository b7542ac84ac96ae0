"""Evaluation of tool-using models with SAAR: the rollout core, the benchmarks, the engines, the reports and the
Inspect face (providers, solver, scorers, the task builder); ``python -m harness`` is the front door.
"""
