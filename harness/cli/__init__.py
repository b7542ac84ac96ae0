"""The subcommands of ``python -m harness``, one module each.

Each module has ``add_arguments(parser)`` (its options) and ``run(args) -> int`` (its exit status):
:mod:`~harness.cli.compare`, :mod:`~harness.cli.regression`, :mod:`~harness.cli.demo` and :mod:`~harness.cli.prompts`
here, ``serve`` in :mod:`harness.engines.serve` and ``protocol`` in :mod:`harness.reports.card`.
:mod:`~harness.cli.forward` hands the training and sandbox tools to ``python -m trainers`` and ``python -m sandboxes``.
``harness/__main__.py`` only builds the parser from them and dispatches.
"""
