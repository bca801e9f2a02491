"""What a comparison judged (``fp4bench.gate.coverage``): an empty or partial comparison is
incomplete (exit 3) with its own message, in ``compare``, ``fp4bench compare`` and the pytest run;
sweep options narrow what is expected as ``-k`` does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakes.benchjson import bench_entry, bench_json, samples
from fp4bench.backends.base import DEFAULT_TACTIC, Tactic
from fp4bench.cli.command import EXIT_INCOMPLETE
from fp4bench.cli.compare import compare_main
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.coverage import Scope
from fp4bench.gate.policy import Policy
from fp4bench.gate.verdict import Status
from fp4bench.run.linelog import LineLog
from fp4bench.report.tables import verdict_message, verdict_summary, verdict_table
from fp4bench.run.sweep import SweepOptions, selection_of
from fp4bench.report.textfit import WIDTH
from fakes.pytest_run import GATE, GATE_IDS, SteadySpin, steady_baseline, write_json, faster_baseline

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry")
#: a test whose in-process runs time the steady backends of tests/fakes/pytest_run.py on the
#: simulated clock
steady = pytest.mark.usefixtures("sim_clock")
#: a candidate saved with one window of each case: what it covers is the point, not its windows
ONE_WINDOW = ("--fp4-windows", "1")

MED = 23.1e-6


def _extra(backend, model="glm-5", kind="dense", batch=1):
    return {"backend": backend, "model": model, "kind": kind, "batch": batch, "tp": 1}


def _base(rng, names_extra):
    return parse_baseline(bench_json([bench_entry(n, samples(rng, MED, 0.01), x) for n, x in names_extra]))


# --- the account ----------------------------------------------------------------------------------


def test_nothing_in_common_is_incomplete_even_with_allow_missing():
    rng = np.random.default_rng(1)
    base = _base(rng, [("b::t[a]", {}), ("b::t[b]", {})])
    cur = {"b::t[z]": (samples(rng, MED, 0.01), {})}
    for policy in (Policy(), Policy(allow_missing=True)):
        res = compare(base, cur, policy=policy)
        assert res.exit_code == EXIT_INCOMPLETE == 3
        assert res.coverage.empty and res.coverage.expected == ("b::t[a]", "b::t[b]")
        assert "no regression" not in verdict_summary(res)
        assert "INCOMPLETE: nothing judged: judged 0 of 2 expected benchmarks (2 MISSING)" in verdict_summary(res)


def test_empty_baseline_selection_is_incomplete():
    rng = np.random.default_rng(2)
    base = _base(rng, [("b::t[a]", {})])
    res = compare(base, {}, scope=Scope(excluded=frozenset({"b::t[a]"})))
    assert res.exit_code == 3 and res.coverage.not_selected == ("b::t[a]",)
    assert "the selection holds none of the baseline's benchmarks (1 not selected)" in verdict_summary(res)


def test_partial_passes_with_allow_missing_and_says_what_is_missing():
    rng = np.random.default_rng(3)
    base = _base(rng, [("b::t[a]", {}), ("b::t[b]", {})])
    cur = {"b::t[a]": (samples(rng, MED, 0.01), {})}
    assert compare(base, cur).exit_code == 3
    res = compare(base, cur, policy=Policy(allow_missing=True))
    assert res.exit_code == 0
    assert "coverage: judged 1 of 2 expected benchmarks (1 MISSING)" in verdict_table(res)


def test_invalid_timings_are_compared_not_judged():
    rng = np.random.default_rng(4)
    base = _base(rng, [("b::t[a]", {"clock_anomaly": True})])
    res = compare(base, {"b::t[a]": (samples(rng, MED, 0.01), {})}, policy=Policy(allow_ambiguous=True))
    assert res.verdicts[0].status is Status.INVALID
    assert res.exit_code == 3 and "1 compared, not judged: INVALID or too few samples" in res.coverage.summary()


def test_regression_wins_over_incomplete():
    rng = np.random.default_rng(5)
    base = _base(rng, [("b::t[a]", {}), ("b::t[b]", {})])
    res = compare(base, {"b::t[a]": (samples(rng, MED * 1.5, 0.01), {})})
    assert res.exit_code == 1 and res.coverage.missing == ("b::t[b]",)


def test_many_missing_collapse_to_one_line_per_backend_and_model():
    rng = np.random.default_rng(6)
    names = [(f"bench/test_fp4_gemm.py::test_dense[fi-{i}]", _extra("flashinfer-cutlass")) for i in range(300)]
    names += [("bench/test_fp4_gemm.py::test_dense[bf16-0]", _extra("torch-bf16"))]
    base = _base(rng, names)
    res = compare(base, {names[-1][0]: (samples(rng, MED, 0.01), {})}, policy=Policy(allow_missing=True))
    text = verdict_table(res)
    assert res.exit_code == 0
    assert "MISSING (300) — in the baseline, not measured now:" in text
    assert "  flashinfer-cutlass glm-5: 300 (test_dense[fi-0], test_dense[fi-1], test_dense[fi-2], ... 297 more)" \
        in text
    assert len(text.splitlines()) < 40 and max(map(len, text.splitlines())) <= WIDTH


def test_cases_skipped_on_both_sides_are_listed_collapsed():
    rng = np.random.default_rng(7)
    base = _base(rng, [("b::t[a]", {})])
    skipped = {f"b::t[gpu{i}]": "needs CUDA" for i in range(5)}
    res = compare(base, {"b::t[a]": (samples(rng, MED, 0.01), {})}, scope=Scope(skipped_now=skipped))
    text = verdict_table(res)
    assert res.exit_code == 0 and "5 skipped on both sides" in text
    assert "SKIPPED on both sides (5, not judged): b::t[gpu0], b::t[gpu1], b::t[gpu2], ... 2 more" in text


# --- sweep options narrow the expected set like -k ------------------------------------------------


def test_given_backends_narrow_what_is_expected_and_a_lost_tactic_inside_still_fails():
    rng = np.random.default_rng(8)
    base = parse_baseline(bench_json(
        [bench_entry("b::t[bf16]", samples(rng, MED, 0.01), _extra("torch-bf16")),
         bench_entry("b::t[fi]", samples(rng, MED, 0.01), _extra("flashinfer-cutlass")),
         bench_entry("b::t[fi-moe]", samples(rng, MED, 0.01), _extra("flashinfer-cutlass", kind="moe"))],
        availability={"torch-bf16|p|t1": "ok", "flashinfer-cutlass|p|t1": "ok"}))
    opts = SweepOptions(backends=("torch-bf16",))
    given = {"backends": "torch-bf16"}.get
    scope = Scope(selected=selection_of(opts, given))
    cur = {"b::t[bf16]": (samples(rng, MED, 0.01), _extra("torch-bf16"))}
    res = compare(base, cur, availability_now={"torch-bf16|p|t1": "ok"}, scope=scope)
    assert res.exit_code == 0, verdict_table(res)
    assert res.coverage.not_selected == ("b::t[fi]", "b::t[fi-moe]") and not res.by_status(Status.MISSING)
    assert "judged 1 of 1 expected benchmark; 2 not selected" in verdict_table(res)
    lost = compare(base, cur, availability_now={"torch-bf16|p|t1": "unsupported: gone"}, scope=scope)
    assert lost.exit_code == 1 and lost.failures[0].kind == "lost tactic"
    # options not given (taken from the baseline's sweep) do not narrow
    assert selection_of(opts, {}.get) is None
    kinds = selection_of(SweepOptions(kinds=("moe",)), {"kinds": "moe"}.get)
    assert [kinds(r.extra_info) for r in base.benchmarks.values()] == [False, False, True]


def test_a_backend_left_unnamed_on_its_named_only_device_is_not_selected_not_missing():
    """torch-reference on a GPU runs only when named: a baseline that has its rows (recorded
    before, or with it named) judges a default run without them as not selected, never missing."""
    from fp4bench.backends.builtin.torch_reference import TorchReference
    from fp4bench.run.sweep import unnamed_backends

    rng = np.random.default_rng(9)
    base = parse_baseline(bench_json(
        [bench_entry("b::t[bf16]", samples(rng, MED, 0.01), _extra("torch-bf16")),
         bench_entry("b::t[ref]", samples(rng, MED, 0.01), _extra("torch-reference"))],
        availability={"torch-bf16|p|t1": "ok", "torch-reference|p|t1": "ok"}))
    opts = SweepOptions()
    unnamed = unnamed_backends(opts, [TorchReference()], "cuda")
    assert unnamed == {"torch-reference"} and unnamed_backends(opts, [TorchReference()], "cpu") == frozenset()
    assert unnamed_backends(SweepOptions(backends=("torch-reference",)), [TorchReference()], "cuda") == frozenset()
    scope = Scope(selected=selection_of(opts, {}.get, unnamed))
    cur = {"b::t[bf16]": (samples(rng, MED, 0.01), _extra("torch-bf16"))}
    res = compare(base, cur, availability_now={"torch-bf16|p|t1": "ok"}, scope=scope)
    assert res.exit_code == 0, verdict_table(res)
    assert res.coverage.not_selected == ("b::t[ref]",) and not res.by_status(Status.MISSING)
    # without the rule the same run is incomplete: the rows are missing
    assert compare(base, cur, availability_now={"torch-bf16|p|t1": "ok"}).exit_code == 3


@steady
def test_fp4_backends_narrows_a_gated_pytest_run(bench):
    res = bench.runpytest(*GATE, "--fp4-backends", "steady-spin,steady-spin-2", "--fp4-save-baseline", "two.json",
                          *ONE_WINDOW)
    assert res.ret == 0, res.stdout.str()
    assert len(json.loads((bench.path / "two.json").read_text())["benchmarks"]) == 2 * len(GATE_IDS)
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "two.json")  # GATE selects --fp4-backends steady-spin
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "MISSING" not in out
    assert "coverage: judged 2 of 2 expected benchmarks; 2 not selected" in out


@steady
def test_a_selection_no_backend_runs_is_incomplete(bench):
    steady_baseline(bench)
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json", "--fp4-kinds", "moe")  # steady-spin: dense only
    out = res.stdout.str()
    assert res.ret == 3, out
    assert "→ INCOMPLETE: nothing judged: the selection holds none of the baseline's benchmarks (2 not selected)" \
        in out
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json", "-k", "no_such_case")
    assert res.ret == 3, res.stdout.str()


def test_a_partial_line_log_says_incomplete_and_exits_3(tmp_path, capsys):
    rng = np.random.default_rng(9)
    names = ["b::t[a]", "b::t[b]"]
    base = tmp_path / "base.json"
    base.write_text(json.dumps(bench_json([bench_entry(n, samples(rng, MED, 0.01)) for n in names])))
    log = LineLog(tmp_path / "run.lines.jsonl")
    log.header(parse_baseline(json.loads(base.read_text())).fingerprint, {}, names)
    log.case(names[0], "passed", list(samples(rng, MED, 0.01)))
    log.close()
    assert compare_main([str(base), str(log.path)]) == 3
    out = capsys.readouterr().out
    assert "no regression (exit 0)" not in out
    assert out.rstrip().endswith("→ INCOMPLETE: judged 1 of 2 expected benchmarks (1 not reached) (exit 3)")
    assert compare_main([str(base), str(log.path), "--allow-missing"]) == 0


def test_compare_allow_missing_with_nothing_in_common(tmp_path, capsys):
    rng = np.random.default_rng(10)
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(bench_json([bench_entry("b::t[a]", samples(rng, MED, 0.01))])))
    new.write_text(json.dumps(bench_json([bench_entry("b::t[z]", samples(rng, MED, 0.01))])))
    assert compare_main([str(base), str(new), "--allow-missing"]) == 3
    assert "INCOMPLETE: nothing judged: judged 0 of 1 expected benchmark (1 MISSING)" in capsys.readouterr().out



@steady
def test_an_empty_baseline_path_is_a_usage_error(bench):
    for flag in ("--fp4-baseline-file=", "--fp4-baseline-file=  ", "--benchmark-compare="):
        res = bench.runpytest(*GATE, flag)
        err = res.stderr.str()
        assert res.ret == 4, (flag, res.stdout.str(), err)
        assert "empty baseline path" in err and "Traceback" not in err + res.stdout.str()


@steady
def test_an_unclean_candidate_gets_no_approve_hint(bench):
    fast = json.loads(json.dumps(steady_baseline(bench)))
    write_json(bench, "fast.json", faster_baseline(fast, 0.6))  # every case now reads 1.67x slower
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "fast.json", "--fp4-no-confirm", "--fp4-save-baseline", "c.json",
                          *ONE_WINDOW)
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "approve it with" not in out
    assert "candidate baseline written to c.json; its run was not clean" in out
    assert "approve refuses it without --force" in out


def test_a_verdict_line_leaves_out_clock_and_throttle_nobody_recorded():
    rng = np.random.default_rng(11)
    base = _base(rng, [("b::t[a]", {})])
    v = compare(base, {"b::t[a]": (samples(rng, MED, 0.01), {})}).verdicts[0]
    assert "SM clock" not in verdict_message(v) and "throttle" not in verdict_message(v)
    v = compare(base, {"b::t[a]": (samples(rng, MED, 0.01), {"sm_clock_mhz": 1980})}).verdicts[0]
    assert "SM clock ?→1980 MHz" in verdict_message(v)


# --- every narrowing sweep option, one mechanism (sweep.selection_of) ------------------------------

_IN = {"backend": "torch-bf16", "model": "glm-5", "kind": "dense", "batch": 1, "tp": 1, "routing": "zipf1.2",
       "tactic_sweep": "default", "explicit_tactic": False}
_OLD_IN = {k: v for k, v in _IN.items() if k != "tactic_sweep"}  # a baseline recorded before tactic_sweep


@pytest.mark.parametrize(("option", "value", "opts", "inside", "outside"), [
    ("backends", "torch-bf16", SweepOptions(backends=("torch-bf16",)), _IN, {"backend": "flashinfer-cutlass"}),
    ("models", "glm-5", SweepOptions(models=("glm-5",)), _IN, {"model": "deepseek-v3"}),
    ("kinds", "dense", SweepOptions(kinds=("dense",)), _IN, {"kind": "moe"}),
    ("batches", "1", SweepOptions(batches=(1,)), _IN, {"batch": 64}),
    ("tp", "1", SweepOptions(tps=(1,)), _IN, {"tp": 8}),
    # the option's spelling, the problem id's tag: the same routing
    ("routing", "zipf:1.2", SweepOptions(routings=("zipf:1.2",)), _IN, {"routing": "uniform"}),
    ("tactics", "default", SweepOptions(tactics="default"), _IN, {"tactic_sweep": "all", "explicit_tactic": True}),
    ("tactics", "default", SweepOptions(tactics="default"), _OLD_IN, {"explicit_tactic": True}),
], ids=["backends", "models", "kinds", "batches", "tp", "routing", "tactics", "tactics-old-baseline"])
def test_each_sweep_option_narrows_what_is_expected_and_a_loss_inside_is_still_missing(option, value, opts,
                                                                                        inside, outside):
    rng = np.random.default_rng(11)
    names = ("b::t[in]", "b::t[in2]", "b::t[out]")
    extras = (inside, inside, {**inside, **outside})
    base = parse_baseline(bench_json([bench_entry(n, samples(rng, MED, 0.01), x) for n, x in zip(names, extras)]))
    scope = Scope(selected=selection_of(opts, {option: value}.get))
    both = {n: (samples(rng, MED, 0.01), x) for n, x in zip(names[:2], extras)}
    res = compare(base, both, scope=scope)
    assert res.exit_code == 0, verdict_table(res)
    assert res.coverage.not_selected == ("b::t[out]",) and not res.by_status(Status.MISSING)
    lost = compare(base, {names[0]: both[names[0]]}, scope=scope)  # inside the selection, not measured
    assert lost.exit_code == 3 and [v.name for v in lost.by_status(Status.MISSING)] == ["b::t[in2]"]


def test_all_tactics_and_the_full_sweep_narrow_no_tactic_and_the_dense_sweep_ignores_routing():
    every = {"tactic_sweep": "all", "explicit_tactic": True}
    assert selection_of(SweepOptions(tactics="all"), {"tactics": "all"}.get) is None
    assert selection_of(SweepOptions(tactics="default", full=True), {"tactics": "default"}.get) is None
    tactics = selection_of(SweepOptions(tactics="default"), {"tactics": "default"}.get)
    assert not tactics(every) and tactics({"tactic_sweep": "default"}) and tactics({})  # unrecorded: kept
    routing = selection_of(SweepOptions(routings=("uniform",)), {"routing": "uniform"}.get)
    assert routing({"routing": "dense-sweep", "batch": 4096}) and not routing({"routing": "zipf1.2"})


class TwoTactics(SteadySpin):
    """steady-spin with a second tactic: the library's default and an explicit ``t01``."""

    name = "two-tactic"

    def tactics(self, problem, device):
        return [DEFAULT_TACTIC, Tactic(value=1, label="t01")]


BACKENDS = [TwoTactics()]  # loaded into the inner runs with --fp4-plugin test_coverage
TWO = [*GATE, "--fp4-plugin", __name__, "--fp4-backends", "two-tactic"]


@steady
def test_default_tactics_gated_against_an_all_tactics_baseline_expect_the_default_tactics_only(bench):
    res = bench.runpytest(*TWO, "--fp4-tactics", "all", "--fp4-save-baseline", "all.json", *ONE_WINDOW)
    assert res.ret == 0, res.stdout.str()
    data = json.loads((bench.path / "all.json").read_text())
    assert sorted(b["extra_info"]["tactic_sweep"] for b in data["benchmarks"]) == ["all", "all", "default", "default"]
    res = bench.runpytest(*TWO, "--fp4-tactics", "default", "--fp4-baseline-file", "all.json")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "MISSING" not in out and "coverage: judged 2 of 2 expected benchmarks; 2 not selected" in out
    # a default-tactic benchmark of the baseline that this run did not measure is still a loss
    ghost = json.loads(json.dumps(next(b for b in data["benchmarks"] if b["extra_info"]["tactic_sweep"] == "default")))
    ghost["fullname"] = ghost["fullname"].replace("shared_", "ghost_")
    data["benchmarks"].append(ghost)
    write_json(bench, "ghost.json", data)
    res = bench.runpytest(*TWO, "--fp4-tactics", "default", "--fp4-baseline-file", "ghost.json")
    assert res.ret == 3 and "MISSING (1)" in res.stdout.str(), res.stdout.str()


@steady
def test_fp4_routing_narrows_a_gated_pytest_run(bench):
    res = bench.runpytest(*GATE, "--fp4-routing", "uniform,zipf:1.2", "--fp4-save-baseline", "two.json", *ONE_WINDOW)
    assert res.ret == 0, res.stdout.str()
    assert len(json.loads((bench.path / "two.json").read_text())["benchmarks"]) == 4
    res = bench.runpytest(*GATE, "--fp4-routing", "zipf:1.2", "--fp4-baseline-file", "two.json")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "MISSING" not in out and "coverage: judged 2 of 2 expected benchmarks; 2 not selected" in out
