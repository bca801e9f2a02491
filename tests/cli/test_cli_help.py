"""Every ``fp4bench`` command's ``--help``: fast (no torch, numpy or scipy imported), every option
with help text and its default, no RST markup; ``fp4bench --version``; the same for every
``--fp4-*`` pytest option."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fp4bench
from fp4bench import cli

SRC = str(Path(fp4bench.__file__).resolve().parents[1])
COMMANDS = ("env", "compare", "power", "fidelity", "baseline", "ab", "workload", "shapes", "report", "prepare",
            "stack", "units", "bisect", "history")
HEAVY = ("torch", "numpy", "scipy")


def test_help_of_every_command_imports_no_torch_numpy_or_scipy():
    # a fresh interpreter: what `fp4bench CMD --help` loads before it prints (timing-free)
    code = ("import contextlib, io, json, sys\nfrom fp4bench.cli import main\nout = {}\n"
            f"for cmd in {COMMANDS + ('baseline approve', 'stack freeze')!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            rc = main(cmd.split() + ['--help'])\n"
            "        except SystemExit as e:\n            rc = e.code\n"
            f"    out[cmd] = [rc, [m for m in {HEAVY!r} if m in sys.modules]]\n"
            "print(json.dumps(out))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.splitlines()[-1])
    assert {c: v for c, v in got.items() if v != [0, []]} == {}


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"fp4bench {fp4bench.__version__}\n"


class _Caught(Exception):
    pass


def _parsers(monkeypatch) -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, caught at its parse_args (nothing after it runs), subcommands included."""
    caught: list[argparse.ArgumentParser] = []

    def grab(self, *a, **k):
        caught.append(self)
        raise _Caught

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    out = {}
    for cmd in COMMANDS:
        with pytest.raises(_Caught):
            cli.main([cmd])
        out[cmd] = caught.pop()
    for name, ap in list(out.items()):
        for act in ap._actions:
            if isinstance(act, argparse._SubParsersAction):
                out.update({f"{name} {sub}": p for sub, p in act.choices.items()})
    return out


def _undocumented(actions, render) -> list[str]:
    bad = []
    for act in actions:
        if isinstance(act, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)):
            continue
        name = "/".join(act.option_strings) or act.dest
        text = render(act)
        if not text.strip():
            bad.append(f"{name}: no help")
        elif act.option_strings and act.nargs != 0 and not act.required and "default" not in text \
                and not isinstance(act, argparse._AppendAction):
            bad.append(f"{name}: no default in {text!r}")
    return bad


def test_every_option_of_every_command_has_help_and_its_default(monkeypatch):
    bad = []
    for cmd, ap in _parsers(monkeypatch).items():
        fmt = ap._get_formatter()
        bad += [f"{cmd} {b}" for b in _undocumented(ap._actions, lambda a: fmt._expand_help(a) if a.help else "")]
        text = ap.format_help()
        if "``" in text:
            bad.append(f"{cmd}: RST double backticks in --help")
    assert bad == []


def test_every_fp4_pytest_option_has_help_and_its_default():
    from fp4bench import plugin

    seen: list[argparse.Action] = []
    ap = argparse.ArgumentParser()

    class Group:
        def addoption(self, *names, **kw):
            if names[0].startswith("--fp4-"):
                seen.append(ap.add_argument(*names, **kw))

        _addoption = addoption

    class Parser:
        def getgroup(self, *a, **k):
            return Group()

        def addoption(self, *names, **kw):
            Group().addoption(*names, **kw)

        def addini(self, *a, **k):
            pass

    plugin.pytest_addoption(Parser())
    assert len(seen) > 20
    fmt = ap._get_formatter()
    assert _undocumented(seen, lambda a: fmt._expand_help(a) if a.help else "") == []


def test_compare_options_default_to_the_gates_policy():
    from fp4bench.gate.policy import DISPATCH_POLICIES, Policy
    from fp4bench.options.registry import option

    d = Policy()
    assert {n: option(n).default for n in ("verdict-min-samples", "dispatch")} == {
        "verdict-min-samples": d.min_samples, "dispatch": d.dispatch}
    assert option("dispatch").choices == DISPATCH_POLICIES
