"""The Inspect face: the solver, the scorers, the task builder, the embedded and replay model providers, and the
runs of a SAAR ablation's arms and of the regression's baselines.
"""
