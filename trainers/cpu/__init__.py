"""The CPU trainer: TRL's GRPO with LoRA on the embedded model, its rollouts and run directories, and the SAAR
training ablation.
"""
