"""Training with SAAR, above the harness: OpenRLHF recipes and its agent plugin, the CPU trainer and its ablation, the
warm model's build; ``python -m trainers`` is the front door.
"""
