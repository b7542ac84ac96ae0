"""Text generation: the embedded CPU model, batched generation, the replay model, vLLM's server and in-process
engine, and the checks run before an engine starts.
"""
