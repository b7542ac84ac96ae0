"""What the trainers share: recipes and config, training data, the reward, the token view of a trajectory, engine
sync, rescoring, sandbox faults, memory estimates and plots.
"""
