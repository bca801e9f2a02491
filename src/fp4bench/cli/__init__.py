"""The ``fp4bench`` command: ``main`` dispatches to one module per command."""

from fp4bench.cli.main import main  # noqa: F401
