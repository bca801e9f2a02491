"""Option values (parsing, argparse types) and the registry's defaults against their owners."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from fp4bench.gate.policy import Policy
from fp4bench.models import list_models
from fp4bench.options.adapters import add_options
from fp4bench.options.registry import option, options_of, policy_kwargs
from fp4bench.options.values import (fraction, int_list, parse_ints, parse_kinds, parse_models, parse_routings, parse_tps,
                                     percent, positive_seconds)


def test_parse_models():
    assert [m.name for m in parse_models("glm-5,deepseek-v3")] == ["glm-5", "deepseek-v3"]
    assert [m.name for m in parse_models(" deepseek-r1 , deepseek-v3,GLM-5")] == ["deepseek-v3", "glm-5"]
    assert [m.name for m in parse_models("all")] == list_models()


@pytest.mark.parametrize(
    "bad, match",
    [("glm-5,nope", "unknown model 'nope'"), ("", "comma-separated"), ("glm-5,,qwen3-30b", "empty item")],
)
def test_parse_models_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_models(bad)


def test_parse_ints():
    assert parse_ints("1,16,512") == (1, 16, 512)
    assert parse_ints(" 8 , 8, 1") == (8, 1)


@pytest.mark.parametrize(
    "bad, match",
    [("1,x", "'x' in '1,x' is not an integer"), ("1.5", "not an integer"), ("0", "must be positive, got 0"),
     ("4,-2", "must be positive, got -2"), ("", "comma-separated"), ("1,", "empty item")],
)
def test_parse_ints_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_ints(bad, "batch")
    with pytest.raises(ValueError, match="^batch"):
        parse_ints(bad, "batch")


def test_parse_tps_checks_divisibility():
    models = parse_models("glm-5,qwen3-235b-a22b")
    assert parse_tps("1,2,8,16", models) == (1, 2, 8, 16)
    with pytest.raises(ValueError, match="TP=3 does not divide glm-5"):
        parse_tps("1,3", models)
    with pytest.raises(ValueError, match="^tp: values must be positive"):
        parse_tps("0")


def test_parse_routings():
    assert [r.tag for r in parse_routings("uniform, zipf:1.2,zipf1.2")] == ["uniform", "zipf1.2"]
    with pytest.raises(ValueError, match="unknown routing 'gauss'"):
        parse_routings("uniform,gauss")


def test_parse_kinds():
    assert parse_kinds("moe, dense") == ("moe", "dense")
    with pytest.raises(ValueError, match=r"unknown kind\(s\) \['gemm'\]"):
        parse_kinds("dense,gemm")


@pytest.mark.parametrize("conv, good, bad", [(percent, "2.5", ["-1", "1000", "x"]), (fraction, "0.01", ["0", "1", "x"]),
                                             (positive_seconds, "0.5", ["0", "-2", "x"]),
                                             (int_list, "1,64", ["1,x", "0", ""])])
def test_argparse_types(conv, good, bad):
    conv(good)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            conv(text)


def test_gate_defaults_are_the_policy_defaults():
    """The option defaults and ``Policy()`` must not drift apart: every front end builds a Policy
    from the options, library callers from its defaults."""
    ap = argparse.ArgumentParser()
    add_options(ap, "compare")
    args = ap.parse_args([])
    built = Policy(**policy_kwargs(lambda n: getattr(args, n.replace("-", "_"))),
                   min_samples=args.verdict_min_samples, dispatch=args.dispatch)
    assert built == Policy()
    assert dataclasses.replace(Policy(), floor=0.1, allow_missing=True) == Policy(**policy_kwargs(
        lambda n: vars(ap.parse_args(["--floor", "10", "--allow-missing"]))[n.replace("-", "_")]))


def test_one_definition_two_spellings():
    """The pytest plugin adds every option it takes as --fp4-<name>, a command as --<name>."""
    assert option("floor").flag("pytest") == "--fp4-floor" and option("floor").flag("compare") == "--floor"
    assert {o.name for o in options_of("pytest")} >= {"floor", "baselines", "models"}
    assert option("baselines").flag("baseline approve") == "--baselines"


def test_ab_defaults_are_the_ab_runs_defaults():
    """``fp4bench ab`` and ``pytest --fp4-ab-against`` show and use ``AbDefaults``' values."""
    from fp4bench.ab.defaults import DEFAULTS as d

    ab = {o.name: o.default for o in options_of("ab")}
    assert {k: ab[k] for k in ("replicates", "rounds", "max-rounds", "round-samples", "placement", "run-budget",
                               "benchmark-budget", "case-timeout")} == {
        "replicates": d.replicates, "rounds": d.rounds, "max-rounds": d.max_rounds, "round-samples": d.round_samples,
        "placement": d.placement, "run-budget": d.time_budget_s, "benchmark-budget": d.benchmark_budget_s,
        "case-timeout": d.timeout_s}
    assert f"longer than {d.round_s:g} s / this" in option("round-samples").help
    pytest_ab = {o.name: o.default for o in options_of("pytest")}
    assert {k: pytest_ab[k] for k in ("replicates", "rounds", "round-samples", "run-budget")} == {
        "replicates": d.replicates, "rounds": d.rounds, "round-samples": d.round_samples, "run-budget": d.time_budget_s}


def test_shapes_gpu_help_names_every_known_gpu():
    from fp4bench.measure.peaks import known_gpus
    from fp4bench.options.registry import KNOWN_GPUS

    assert KNOWN_GPUS == ", ".join(known_gpus())
