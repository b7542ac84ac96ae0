"""The benchmarks: the one problem type (``Problem``, also what the trainers and the generators make), their
registry, loaders, presets, scoring (math, GPQA, LiveCodeBench grading) and problem generators, and the reference
implementation's data and prompts.
"""
