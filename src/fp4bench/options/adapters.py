"""The registry's options on a parser: ``add_options(parser, front)`` adds a command's options to
its argparse parser (``--<name>``), ``add_pytest_options(group)`` the pytest plugin's to its option
group (``--fp4-<name>``). Nothing else in fp4bench adds a ``--`` option (tests/options/test_options_registry.py
checks), so every front end takes exactly what ``options.registry`` defines.

A deprecated spelling is added as a second option string of its option: it parses into the same
value and, when used, warns once naming the new spelling (``options.deprecated.warn_renamed``).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from fp4bench.options.deprecated import warn_renamed
from fp4bench.options.option import PYTEST, Option
from fp4bench.options.registry import options_of

#: argparse's action classes by the names the registry uses (``Option.action``)
_ACTIONS: dict[str | None, type[argparse.Action]] = {
    None: argparse._StoreAction, "store_true": argparse._StoreTrueAction, "append": argparse._AppendAction}


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
        add_argument(*spellings(o, front), **_arguments(o, front))


def spellings(o: Option, front: str) -> tuple[str, ...]:
    """The option strings of ``o`` on ``front``: its flag, then a deprecated one."""
    old = o.old_flag(front)
    return (o.flag(front),) if old is None else (o.flag(front), old)


def _arguments(o: Option, front: str) -> dict[str, Any]:
    kwargs = o.arguments()
    old = o.old_flag(front)
    if old is not None:
        kwargs["action"] = renamed(_ACTIONS[o.action], old, o.flag(front))
    return kwargs


def renamed(action: type[argparse.Action], old: str, new: str) -> type[argparse.Action]:
    """``action`` that warns once when the option is given as ``old``."""

    class Renamed(action):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string == old:
                warn_renamed(old, new)
            super().__call__(parser, namespace, values, option_string)

    Renamed.__name__ = f"Renamed{action.__name__}"
    return Renamed
