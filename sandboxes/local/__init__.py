"""The local backend: each program is a child process of this one, fenced by rlimits and bubblewrap.

:mod:`~sandboxes.local.pool` (the backend), :mod:`~sandboxes.local.sandbox` (one sandbox), its policy
(:mod:`~sandboxes.local.policy`, :mod:`~sandboxes.local.isolation`), process control
(:mod:`~sandboxes.local.procs`) and the sandbox uids (:mod:`~sandboxes.local.uids`).
"""
