"""The option registry is every front end's one source of options: pytest's parser and every
command's take exactly the registry's options, each with its help and its default shown; one name
has one meaning and one spelling (the spellings of before 0.1.0 and abbreviations are refused); every
numeric option has documented bounds; docs/options.md is the registry's own table; commands parse through the one helper in ``cli``."""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest
from _pytest.config.argparsing import Parser

import fp4bench
from fp4bench import plugin
from fp4bench.cli.main import COMMANDS
from fp4bench.options.option import FRONT_ENDS, PYTEST, Option
from fp4bench.options.registry import BY_NAME, OPTIONS, option, options_of
from fakes.paths import ROOT

SRC = Path(fp4bench.__file__).parent
DOCS = ROOT / "docs" / "options.md"


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, a subcommand's by its full name (``baseline approve``)."""
    out = {}
    for cmd, (module, _) in COMMANDS.items():
        ap = importlib.import_module(module).build_parser()
        subs = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            out.update({f"{cmd} {name}": p for name, p in subs[0].choices.items()})
        else:
            out[cmd] = ap
    return out


def pytest_parser() -> Parser:
    """pytest's parser with the fp4bench plugin's options only."""
    p = Parser(_ispytest=True)
    plugin.pytest_addoption(p)
    return p


def _options(ap: argparse.ArgumentParser, only: str = "--") -> dict[tuple[str, ...], argparse.Action]:
    return {tuple(a.option_strings): a for a in ap._actions
            if a.option_strings and a.option_strings[0].startswith(only) and a.option_strings[0] != "--help"}


def all_parsers() -> dict[str, dict[tuple[str, ...], argparse.Action]]:
    out = {front: _options(ap) for front, ap in command_parsers().items()}
    out[PYTEST] = _options(pytest_parser().optparser, "--fp4-")
    return out


def test_every_front_end_takes_exactly_the_registrys_options():
    parsers = all_parsers()
    assert sorted(parsers) == sorted(FRONT_ENDS)
    bad = []
    for front, seen in parsers.items():
        expected = {(o.flag(front),): o for o in options_of(front)}
        bad += [f"{front}: {' '.join(f)} is not the registry's" for f in seen if f not in expected]
        bad += [f"{front}: {' '.join(f)} is missing" for f in expected if f not in seen]
        for flags, o in expected.items():
            a = seen.get(flags)
            if a is not None and (a.help, a.default, a.type, a.choices, a.required, a.metavar) != \
                    (o.help, o.default, o.type, o.choices, o.required, o.metavar):
                bad.append(f"{front}: {flags[0]} differs from its registry entry")
    assert bad == []


def test_every_option_has_help_and_shows_its_default():
    bad = []
    for front, seen in all_parsers().items():
        fmt = argparse.ArgumentParser()._get_formatter()
        for flags, a in seen.items():
            text = fmt._expand_help(a) if a.help else ""
            if not text.strip():
                bad.append(f"{front} {flags[0]}: no help")
            elif a.nargs != 0 and not a.required and not isinstance(a, argparse._AppendAction) \
                    and "default" not in text:
                bad.append(f"{front} {flags[0]}: no default in {text!r}")
    assert bad == []


def test_the_running_pytest_session_takes_only_registry_fp4_options(pytestconfig):
    """Whatever else is loaded, every ``--fp4-*`` option pytest knows is one of the registry's."""
    live = {s for a in pytestconfig._parser.optparser._actions for s in a.option_strings if s.startswith("--fp4-")}
    assert live == {o.flag(PYTEST) for o in options_of(PYTEST)}


def test_one_name_one_meaning():
    assert len(BY_NAME) == len(OPTIONS)
    with pytest.raises(ValueError, match="defined twice"):
        from fp4bench.options.registry import _by_name

        _by_name((option("floor"), option("floor")))
    # the clashes of issue 20, each now two names
    assert option("min-samples").fronts == (PYTEST,) and option("verdict-min-samples").fronts == ("compare",)
    assert option("same-unit").fronts == (PYTEST,) and option("assume-same-unit").fronts == ("power",)
    assert "file" in option("baseline-file").help and "folder" in option("baselines").help
    assert option("time-budget").fronts == (PYTEST,) and "per case" in option("time-budget").help
    assert set(option("run-budget").fronts) == {PYTEST, "ab", "units", "calibrate"}
    assert set(option("verdict-json").fronts) == {PYTEST, "compare", "ab", "units"}
    assert {"json", "timer", "model", "batch", "baseline"}.isdisjoint(BY_NAME)
    assert {"allow-missing", "allow-ambiguous", "fail-on-ambiguous"} <= {o.name for o in options_of("ab")}
    assert {"models", "batches", "tp"} <= {o.name for o in options_of("workload")}
    assert {"models", "batches", "tp", "routing"} <= {o.name for o in options_of("shapes")}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "Floor"}, "lower-case words"),
    ({"help": " "}, "no help"),
    ({"fronts": ("compare", "compare")}, "each front end once"),
    ({"fronts": ("cmp",)}, "unknown front end 'cmp'"),
    ({"per_front": {"ab": {"default": 1}}}, "'ab' sets its own value but does not take the option"),
    ({"per_front": {"compare": {"choices": ("a",)}}}, "compare may set only default, help, type, required"),
    ({"action": "count"}, "action 'count'"),
])
def test_a_bad_definition_is_refused_naming_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Option(**{"name": "floor", "help": "h", "fronts": ("compare",), **kwargs})


def test_an_option_a_front_end_does_not_take():
    with pytest.raises(ValueError, match="--stack-dir is not an option of compare"):
        option("stack-dir").on("compare")
    with pytest.raises(ValueError, match="unknown front end 'nope'"):
        options_of("nope")
    with pytest.raises(KeyError, match="no option 'nope'"):
        option("nope")


#: what a front end's parser needs besides the option
REQUIRED = {"ab": ["--a", "x", "--b", "y"], "report": ["r.json", "--out", "o"], "compare": ["a.json", "b.json"],
            "power": ["a.json", "b.json"]}
#: the spellings 0.1.0 dropped before its release (front end, spelling, a value): one name per option
OLD = [("workload", "--model", "glm-5"), ("shapes", "--model", "glm-5"), ("workload", "--batch", "64"),
       ("shapes", "--batch", "64"), (PYTEST, "--fp4-baseline", "b.json"), ("report", "--baseline", "b.json"),
       ("power", "--same-unit", None), ("compare", "--min-samples", "3"), (PYTEST, "--fp4-ab-env", "X=1"),
       (PYTEST, "--fp4-ab-replicates", "4"), (PYTEST, "--fp4-ab-rounds", "4"), (PYTEST, "--fp4-ab-max-resident", "4"),
       (PYTEST, "--fp4-ab-round-samples", "5"), ("ab", "--timer", "cupti"), (PYTEST, "--fp4-ab-time-budget", "60"),
       ("ab", "--time-budget", "60"), ("units", "--time-budget", "60"), ("compare", "--json", "v.json"),
       ("ab", "--json", "v.json"), ("units", "--json", "v.json"), ("fidelity", "--json", "r.json"),
       (PYTEST, "--fp4-drift", "2"), (PYTEST, "--fp4-alpha", "0.01"), ("compare", "--noise-k", "2")]


def _parse(front: str, argv: list[str]) -> dict:
    if front == PYTEST:
        return vars(pytest_parser().parse(argv))
    return vars(command_parsers()[front].parse_args(REQUIRED.get(front, []) + argv))


@pytest.mark.parametrize(("front", "old", "value"), OLD, ids=[f"{f} {o}" for f, o, _ in OLD])
def test_a_dropped_spelling_is_refused(front, old, value, capsys):
    """One name per option: ``--json`` next to ``--verdict-json`` silently kept the last value."""
    with pytest.raises((SystemExit, pytest.UsageError)):
        _parse(front, [old, *([value] if value is not None else [])])


@pytest.mark.parametrize(("front", "argv"), [("workload", ["--mod", "glm-5"]), ("compare", ["--verdict-j", "v.json"]),
                                             ("shapes", ["--batch", "64"]), ("stack freeze", ["--run", "r"]),
                                             (PYTEST, ["--fp4-flo", "3"])])
def test_no_parser_takes_an_abbreviation(front, argv, capsys):
    with pytest.raises((SystemExit, pytest.UsageError)):
        _parse(front, argv)
    assert all(not ap.allow_abbrev for ap in command_parsers().values())


def test_every_numeric_option_has_documented_bounds():
    """``int``/``float`` take any number (``--fp4-windows 1000000`` ran silently); every numeric option
    has a bounded type whose bounds docs/options.md shows."""
    from fp4bench.options.doc import bounds_of

    for o in OPTIONS:
        for front in o.fronts:
            t = o.on(front).type
            assert t not in (int, float), f"{front} --{o.name}: unbounded {t.__name__}"
            if o.on(front).default is not None and isinstance(o.on(front).default, (int, float)) \
                    and not isinstance(o.on(front).default, bool) and o.action is None:
                assert bounds_of(o.on(front)), f"{front} --{o.name}: no documented bounds"
    assert "bounds: 1..100" in DOCS.read_text()
    for front, argv in ((PYTEST, ["--fp4-windows", "101"]), (PYTEST, ["--fp4-windows", "0"]),
                        (PYTEST, ["--fp4-progress", "-1"]), (PYTEST, ["--fp4-target-ci", "0"]),
                        ("fidelity", ["--n", "0"]), ("units", ["--windows", "1"])):
        with pytest.raises((SystemExit, pytest.UsageError)):
            _parse(front, argv)


def test_docs_options_md_is_the_registrys_table():
    from fp4bench.options.doc import render

    assert DOCS.read_text() == render(), "regenerate it: python -m fp4bench.options.doc > docs/options.md"
    for o in OPTIONS:
        assert f"| `{o.name}`" in DOCS.read_text()


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node


def test_no_option_is_added_outside_the_registrys_adapters():
    """Only ``options.adapters`` adds an option; ``cli.command`` adds a command's positionals."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for call in _calls(path):
            if call.func.attr not in ("add_argument", "addoption"):
                continue
            positional = rel == "cli/command.py" and call.args and isinstance(call.args[0], ast.Name)
            if rel != "options/adapters.py" and not positional:
                bad.append(f"{rel}:{call.lineno}")
    assert bad == []


def test_every_command_parses_through_the_one_helper():
    """No command catches argparse's ``SystemExit`` or calls ``parse_args`` itself: ``cli.command.run``."""
    bad = []
    for path in sorted((SRC / "cli").glob("*.py")):
        if path.name == "command.py":
            continue
        tree = ast.parse(path.read_text())
        bad += [f"{path.name}:{n.lineno} catches SystemExit" for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler)
                and "SystemExit" in ast.unparse(n.type or ast.Constant(None))]
        bad += [f"{path.name}:{c.lineno} calls parse_args" for c in _calls(path) if c.func.attr == "parse_args"]
    assert bad == []
    for cmd, (module, func) in COMMANDS.items():
        assert callable(getattr(importlib.import_module(module), func)), cmd


def test_the_helper_returns_argparses_exit_status(capsys):
    from fp4bench.cli.command import EXIT_OK, EXIT_USAGE, parser, run

    ap = parser("compare", positionals=[("base", "b", None), ("new", "n", None)])
    assert run(ap, ["--help"], lambda args: 7) == EXIT_OK
    assert run(ap, ["--floor", "x"], lambda args: 7) == EXIT_USAGE
    assert "argument --floor: expected a percentage like 5 or 2.5, got 'x'" in capsys.readouterr().err
    assert run(ap, ["a.json", "b.json"], lambda args: 7) == 7
    assert run(ap, ["a.json", "b.json"], lambda args: args.floor) == 5.0


def test_ab_hands_its_policy_flags_to_its_judge(monkeypatch):
    """``fp4bench ab --allow-missing --allow-ambiguous --fail-on-ambiguous``: the Policy ab's judge gets."""
    import sys

    import fp4bench.ab.judge as ab_judge
    import fp4bench.ab.report as ab_report
    import fp4bench.ab.run as ab_run
    from fp4bench.cli.ab import ab_main

    got = []

    class Runner:
        def __init__(self, *a, **k):
            pass

        def run(self, sweep_for, only=None):
            return "run"

    monkeypatch.setattr(ab_run, "AbRunner", Runner)
    monkeypatch.setattr(ab_judge, "judge", lambda run, policy: got.append(policy) or "result")
    monkeypatch.setattr(ab_report, "report", lambda run, result: "")
    monkeypatch.setattr(ab_judge, "outcome", lambda run, result: (0, ""))
    argv = ["--a", sys.executable, "--b", sys.executable]
    assert ab_main(argv) == 0
    assert ab_main([*argv, "--allow-missing", "--allow-ambiguous", "--fail-on-ambiguous", "--floor", "4"]) == 0
    first, second = got
    assert (first.floor, first.allow_missing, first.allow_ambiguous, first.fail_on_ambiguous) == (0.03, False, False, False)
    assert (second.floor, second.allow_missing, second.allow_ambiguous, second.fail_on_ambiguous) == (0.04, True, True, True)
