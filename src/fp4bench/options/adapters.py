"""The registry's options on a parser: ``add_options(parser, front)`` adds a command's options to
its argparse parser (``--<name>``), ``add_pytest_options(group)`` the pytest plugin's to its option
group (``--fp4-<name>``). Nothing else in fp4bench adds a ``--`` option (tests/options/test_options_registry.py
checks), so every front end takes exactly what ``options.registry`` defines.

Each option has one spelling per front end: no alias, no deprecated name.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from fp4bench.options.option import PYTEST
from fp4bench.options.registry import options_of


def add_options(parser: argparse.ArgumentParser, front: str) -> None:
    """Every option of the command ``front`` (e.g. ``"compare"``, ``"baseline approve"``)."""
    if front == PYTEST:
        raise ValueError("pytest's options go on its option group: add_pytest_options")
    _add(parser.add_argument, front)


def add_pytest_options(group: Any) -> None:
    """Every ``--fp4-*`` option, on a pytest option group (``parser.getgroup(...)``)."""
    _add(group.addoption, PYTEST)


def _add(add_argument: Callable[..., Any], front: str) -> None:
    for o in options_of(front):
        add_argument(o.flag(front), **o.arguments())
