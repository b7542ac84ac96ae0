"""What runs are read into: the SAAR ablation report and its statistics, regression baselines and the protocol
card.
"""
