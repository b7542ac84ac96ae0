"""The rollout core every face shares: messages, the tool environment and protocol, chat rendering, prompts, the
multi-turn loop with SAAR, seeds and metrics.
"""
