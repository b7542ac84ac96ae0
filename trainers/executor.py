"""The old path of the OpenRLHF agent plugin, kept so ``--train.agent_func_path trainers/executor.py`` still works.

The plugin lives in :mod:`trainers.openrlhf_plugin.executor`; OpenRLHF loads this file by path and finds
``AgentExecutor`` here.
"""

from trainers.openrlhf_plugin.executor import AgentExecutor

__all__ = ["AgentExecutor"]
