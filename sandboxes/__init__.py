"""Code execution for tool calls: the sandbox interface, its two backends (local, docker) and their registry, the
sandbox image and the Inspect sandbox provider; ``python -m sandboxes run FILE...``.
"""
