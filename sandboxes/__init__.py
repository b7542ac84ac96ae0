"""Code execution for tool calls: the sandbox interface, its two backends (local, docker) and their registry, the
sandbox image and the Inspect sandbox provider; ``python -m sandboxes run FILE...``.
"""

#: ``python -m sandboxes``'s commands and what each does: its parser's help, and what ``python -m harness --help``
#: lists (the harness imports this list; the sandboxes never import the harness)
COMMANDS = {
    "run": "run Python files one after the other in one sandbox, one JSON line each",
}
