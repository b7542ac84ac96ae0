"""The benchmarks: their registry, loaders, presets, scoring (math, GPQA, LiveCodeBench grading) and problem
generators, and the reference implementation's data and prompts.
"""
