"""Shared options: value parsing, argparse types, and one definition for pytest and the CLI."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from fp4bench.gate.policy import Policy
from fp4bench.models import list_models
from fp4bench.options.registry import (BASELINES, GATE, SWEEP, add_options, alpha, int_list, parse_ints, parse_kinds,
                              parse_models, parse_routings, parse_tps, percent, policy_kwargs, positive_seconds)

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


@pytest.mark.parametrize("conv, good, bad", [(percent, "2.5", ["-1", "1000", "x"]), (alpha, "0.01", ["0", "1", "x"]),
                                             (positive_seconds, "0.5", ["0", "-2", "x"]),
                                             (int_list, "1,64", ["1,x", "0", ""])])
def test_argparse_types(conv, good, bad):
    conv(good)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            conv(text)


def test_gate_defaults_are_the_policy_defaults():
    """The option defaults and ``Policy()`` must not drift apart: both front ends build a Policy
    from the options, library callers from its defaults."""
    ap = argparse.ArgumentParser()
    add_options(ap.add_argument, GATE)
    args = ap.parse_args([])
    built = Policy(**policy_kwargs(lambda n: getattr(args, n.replace("-", "_"))))
    assert built == Policy()
    assert dataclasses.replace(Policy(), floor=0.1, allow_missing=True) == Policy(**policy_kwargs(
        lambda n: vars(ap.parse_args(["--floor", "10", "--allow-missing"]))[n.replace("-", "_")]))


def test_one_definition_two_spellings():
    """The pytest plugin adds every shared option as --fp4-<name>, a command as --<name>."""
    seen: dict[str, dict] = {}
    ap = argparse.ArgumentParser()
    add_options(ap.add_argument, SWEEP + GATE + (BASELINES,))
    add_options(lambda name, **kw: seen.setdefault(name, kw), SWEEP + GATE + (BASELINES,), "fp4-")
    for action in ap._actions[1:]:
        (flag,) = action.option_strings
        assert "--fp4-" + flag[2:] in seen
    assert {"--fp4-floor", "--fp4-drift", "--fp4-alpha", "--fp4-baselines", "--fp4-models"} <= set(seen)


def test_drift_and_alpha_are_deprecated_warn_once_and_change_nothing():
    import warnings

    import fp4bench.options.deprecated as dep
    from fp4bench.gate.policy import Policy

    dep._SAID.difference_update({"drift", "alpha"})
    given = {"floor": 5.0, "drift": 2.0, "alpha": 0.01}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        kw = policy_kwargs(given.get)
        policy_kwargs(given.get)
    assert kw == {"floor": 0.05}
    said = sorted(str(w.message) for w in seen)
    assert len(said) == 2 and all("no longer applies" in m for m in said)
    assert "--alpha" in said[0] and "--drift" in said[1]
    assert Policy(**kw).rule_settings() == Policy().rule_settings()
