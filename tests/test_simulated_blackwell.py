"""``pytest bench`` end to end on a simulated B200 (SM100) and RTX PRO 6000 (SM120), on CPU.

The real user path -- plugin -> sweep -> CaseRunner -> verify -> baseline/gate -- runs in a
``pytest bench`` session with the fake ``flashinfer`` / ``sgl_kernel`` packages and the ``fp4sim``
plugin (tests/fakes/sim: device capability, torch's FP4 ``_scaled_mm`` kernels, kernel names)
on its path; each session runs inside this process as if it were a fresh one
(``fakes/sim/fp4sim_session.py``). Every Blackwell backend must PASS with correct libraries; each
fault must end in its own named outcome, never PASS and never "unsupported" for a marshalling bug;
a baseline from one simulated run gates a simulated FlashInfer upgrade that dropped or re-ordered
configs; the simulated upgrade is also judged by ``fp4bench ab`` with real worker processes (the
one test here marked ``e2e``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.flashinfer import SM120_CONFIGS
from fakes.paths import ROOT
from fakes.sim import fp4sim_session
from fakes.sim_bench import FLASHINFER, SIM, TIMED, bench, outcomes, sim_path
from fakes.wrapped import unwrapped

BLACKWELL = ("flashinfer-cutlass", "flashinfer-cutlass-moe-nvfp4", "sgl-kernel", "sgl-kernel-group",
             "cublaslt", "cublaslt-v2", "cublaslt-v2-mxfp4")
QUANTIZERS = ("flashinfer-fp4-quantize", "flashinfer-nvfp4-quantize", "sgl-kernel-fp4-quant")
E2E = ("e2e-flashinfer-cutlass", "e2e-sgl-kernel")


def verdict_rows(stdout: str) -> list[str]:
    """The verdict table's rows, each joined with its indented continuation lines (the table
    wraps a verdict's explanation under its row to stay within 160 characters)."""
    rows: list[str] = []
    for line in stdout.splitlines():
        if re.match(r"(PASS|FAIL|AMBIGUOUS|INVALID|MISSING|NEW)\b", line):
            rows.append(line)
        elif rows and line.startswith(" " * 8) and line.strip():
            rows[-1] += " " + line.strip()
        elif rows and not line.strip():
            rows.append("")
    return [r for r in rows if r]


def of(res: fp4sim_session.Run, backend: str) -> dict[str, tuple[str, str]]:
    return {k: v for k, v in outcomes(res).items() if k.startswith(f"{backend}-") and not k.startswith(f"{backend}-nvfp4")}


@pytest.mark.parametrize("flashinfer", FLASHINFER)
@pytest.mark.parametrize("gpu", ["B200", "RTX PRO 6000"])
def test_every_blackwell_backend_passes_with_correct_libraries(tmp_path, gpu, flashinfer):
    res = bench(tmp_path, "--fp4-batches", "1", "--fp4-kinds", "dense,grouped,moe,quant", "--benchmark-disable",
                gpu=gpu, flashinfer=flashinfer)
    assert res.returncode == 0, res.stdout[-3000:]
    got = outcomes(res)
    mxfp4_runs = gpu == "B200"  # torch gates MXFP4 to major 10
    for b in BLACKWELL + QUANTIZERS + E2E:
        rows = of(res, b)
        if b == "cublaslt-v2-mxfp4" and not mxfp4_runs:
            assert not rows
            continue
        assert rows and all(s == "PASSED" for s, _ in rows.values()), (b, rows)
    default = [k for k in got if k.startswith("flashinfer-cutlass-default-")]
    assert default, "the quick run times the library's default (-1) row"


FAULT_OUTCOMES = {
    # fault: (backend, test status, text in the message)
    "zero_band": ("flashinfer-cutlass", "FAILED", "all-zero output"),
    "unswizzled_scales": ("sgl-kernel", "FAILED", "mismatch"),
    "gate_up_swapped": ("flashinfer-cutlass-moe-nvfp4", "FAILED", "mismatch"),
    "wrong_alpha": ("cublaslt-v2", "FAILED", "mismatch"),
    "arg_check": ("flashinfer-cutlass-moe-nvfp4", "FAILED", "Check failed"),
}


@pytest.mark.parametrize("fault", sorted(FAULT_OUTCOMES))
def test_each_fault_ends_in_its_own_named_outcome(tmp_path, fault):
    backend, status, text = FAULT_OUTCOMES[fault]
    res = bench(tmp_path, "--fp4-batches", "64", "--fp4-backends", backend, "--fp4-kinds",
                "moe" if "moe" in backend else "dense", "--benchmark-disable", fault=fault)
    rows = of(res, backend)
    assert rows, res.stdout[-3000:]
    assert all(s == status for s, _ in rows.values()), rows
    out = res.stdout
    assert text in out and "unsupported" not in out.lower().split("short test summary")[-1], out[-3000:]
    assert res.returncode == 1


def test_the_3398_quantizer_fault_fails_by_name_while_the_gemm_fed_our_bytes_passes(tmp_path):
    """FlashInfer #3398: all-zero block scales from the quantizer at M = 512 (and 384, 1024);
    the quantizer rows and the end-to-end row fail as "all-zero scales" there, the same GEMM on
    our bytes passes, sgl_kernel's quantizer and every M = 1 row pass."""
    res = bench(tmp_path, "--fp4-batches", "1,512", "--fp4-kinds", "dense,quant", "--fp4-backends",
                "flashinfer-fp4-quantize,flashinfer-nvfp4-quantize,sgl-kernel-fp4-quant,e2e-flashinfer-cutlass,"
                "flashinfer-cutlass", "--benchmark-disable", gpu="RTX PRO 6000", fault="quant_zero_scales")
    got = outcomes(res)
    failed = {k for k, (s, _) in got.items() if s == "FAILED"}
    expected = {k for k in got if "-b512-" in k and not k.startswith(("sgl-kernel", "flashinfer-cutlass-"))}
    assert failed == expected and len(expected) == 2 * 3 + 2, (sorted(failed), res.stdout[-3000:])
    assert all(got[k][0] == "PASSED" for k in got if k not in failed and not k.startswith("skip")), got
    # each failed case named once, whether or not pytest also prints its message in the short
    # summary (it does in full with CI set)
    named = set(re.findall(r"(\S+ \[default\] on \S+): all-zero scales: .*rows 0-511", unwrapped(res.stdout)))
    assert len(named) == len(expected), res.stdout[-3000:]
    assert res.returncode == 1


def test_a_tactic_throwing_can_implement_is_unsupported_with_the_librarys_reason(tmp_path):
    res = bench(tmp_path, "--fp4-batches", "1", "--fp4-backends", "flashinfer-cutlass", "--fp4-kinds", "dense",
                "--fp4-tactics", "all", "--benchmark-disable", fault="can_implement")
    assert res.returncode == 0, res.stdout[-3000:]
    skips = [m for s, m in outcomes(res).values() if s == "SKIPPED" and "unsupported" in m]
    assert skips and all("t01: [FP4 gemm Runner] FP4 Gemm cutlass kernel will fail for params" in m for m in skips)
    passed = [k for k, (s, _) in outcomes(res).items() if s == "PASSED"]
    assert any(k.startswith("flashinfer-cutlass-t00-") for k in passed)


def test_the_moe_tactic_throwing_can_implement_is_unsupported(tmp_path):
    res = bench(tmp_path, "--fp4-batches", "1", "--fp4-backends", "flashinfer-cutlass-moe-nvfp4", "--fp4-kinds",
                "moe", "--fp4-tactics", "all", "--benchmark-disable", fault="can_implement")
    assert res.returncode == 0, res.stdout[-3000:]
    skips = [m for s, m in outcomes(res).values() if s == "SKIPPED" and "unsupported" in m]
    assert len(skips) == 1 and "Grouped GEMM kernel will fail for params" in skips[0]


def test_sglang_rows_need_the_sglang_runner_stack(tmp_path):
    """Under the README's torch the sgl_kernel wheel does not import: both rows skip, naming why."""
    res = bench(tmp_path, "--fp4-batches", "1", "--fp4-backends", "sgl-kernel,sgl-kernel-group",
                "--benchmark-disable", torch_seen="2.13.0")
    assert res.returncode == 0
    skips = [m for s, m in outcomes(res).values() if s == "SKIPPED" and m.startswith("sgl-kernel")]
    # one skip per case, each naming its backend and problem
    assert {m.split(" on ")[0] for m in skips} == {"sgl-kernel", "sgl-kernel-group"}, skips
    assert all("does not import under torch" in m and "built for torch 2.9.1" in m
               and "sglang runner environment" in m for m in skips), skips


def _fi_dense_all(tmp_path: Path, *args: str, library: str = "") -> fp4sim_session.Run:
    """Every simulated tactic of the SM100 dense backend, timed on the simulated clock (``TIMED``):
    each launch of every tactic and build takes the same simulated time, so the baseline and an
    unchanged library time alike exactly, and only identity verdicts can fail these runs at the
    default floor."""
    return bench(tmp_path, "--fp4-batches", "1", "--fp4-backends", "flashinfer-cutlass", "--fp4-kinds", "dense",
                 "--fp4-tactics", "all", *args, library=library, env=TIMED)


@pytest.fixture(scope="module")
def sm100_baseline(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sm100")
    path = tmp / "base.json"
    res = _fi_dense_all(tmp, "--fp4-save-baseline", str(path))
    assert res.returncode == 0, res.stdout[-3000:]
    data = json.loads(path.read_text())
    kernels = {b["extra_info"]["tactic"]: b["extra_info"].get("kernels") for b in data["benchmarks"]}
    assert all(kernels.values()), kernels  # every tactic's kernel is recorded with it
    return path


def test_unchanged_library_passes_its_own_baseline(tmp_path, sm100_baseline):
    res = _fi_dense_all(tmp_path, "--fp4-baseline-file", str(sm100_baseline))
    assert res.returncode == 0, res.stdout[-3000:]
    assert "kernel change" not in res.stdout


def test_dropped_config_is_a_lost_tactic(tmp_path, sm100_baseline):
    res = _fi_dense_all(tmp_path, "--fp4-baseline-file", str(sm100_baseline), library="dropped")
    assert res.returncode == 1, res.stdout[-3000:]
    lost = [v for v in verdict_rows(res.stdout) if v.startswith("FAIL (lost tactic)")]
    assert any("t02" in v and "no tactic of flashinfer-cutlass runs it now" in v for v in lost), res.stdout[-3000:]


def test_reordered_configs_are_kernel_changes_not_timing_deltas(tmp_path, sm100_baseline):
    res = _fi_dense_all(tmp_path, "--fp4-baseline-file", str(sm100_baseline), library="reordered")
    assert res.returncode == 0, res.stdout[-3000:]
    changed = [v for v in verdict_rows(res.stdout) if "now runs another kernel" in v]
    assert any("tactic t01 now runs another kernel" in ln and "now runs as tactic t02" in ln for ln in changed), \
        res.stdout[-3000:]
    assert any("tactic t02 now runs another kernel" in ln for ln in changed)
    assert not [ln for ln in changed if re.search(r"[+-]\d+\.\d%", ln)]  # no Δ on these lines
    assert "lost tactic" not in res.stdout


#: the rows of the simulated upgrade: every simulated tactic and the default of one dense problem
AB_ROWS = [f"flashinfer-cutlass-{t}-sim-tiny-b1-tp1-uniform-shared_down-m1n256k128"
           for t in ("default", "t00", "t01", "t02", "t03")]


def _ab(tmp_path: Path, gpu: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``fp4bench ab`` between the two simulated FlashInfer releases on one simulated GPU: the
    SM120 dense backend, batch 1, one problem (``--only``), every simulated tactic and the default row.

    A simulated launch lasts 20 ms (``FP4SIM_CALL_S``) of the workers' simulated clock
    (``FP4SIM_CLOCK=sim``, fakes/sim/fp4sim_ab.py): what the rule sees is the simulated device
    time alone, whatever the machine's load, and nothing is slept. The fewest processes and rounds
    ``fp4bench ab`` takes (two processes a side, two rounds, three samples a round): each process
    imports torch, which is most of the test's time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update(FP4SIM_GPU=gpu, FP4SIM_FAULT="", FP4SIM_LIBRARY="", FP4SIM_TORCH="2.9.1", FP4SIM_CALL_S="0.02",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), str(SIM)]))
    out = tmp_path / "ab.json"
    a, b = FLASHINFER
    # the CLI's own main, in a process that also loads the simulation (it lists sim-tiny)
    cmd = [sys.executable, "-c", "import sys, fp4sim_ab; from fp4bench.cli import main; sys.exit(main(sys.argv[1:]))",
           "ab", "--a", sys.executable, "--b", sys.executable,
           "--a-env", f"PYTHONPATH={sim_path(a)}", "--a-env", f"FP4SIM_FLASHINFER={a}", "--a-env", "FP4SIM_CLOCK=sim",
           "--b-env", f"PYTHONPATH={sim_path(b)}", "--b-env", f"FP4SIM_FLASHINFER={b}", "--b-env", "FP4SIM_CLOCK=sim",
           "--plugin", "fp4sim_ab", "--models", "sim-tiny", "--backends", "flashinfer-cutlass", "--kinds", "dense",
           "--batches", "1", "--tactics", "all", "--only", ",".join(AB_ROWS), "--device", "cpu", "--replicates", "2",
           "--rounds", "2", "--round-samples", "3", "--floor", "8", "--l2", "hot", "--verdict-json", str(out)]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return res, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.e2e  # fp4bench ab and its workers in child processes
def test_ab_of_the_flashinfer_upgrade_shows_only_the_sm120_stream_k_rows_faster(tmp_path):
    """0.7.4's SM120 launcher skips the stream-K workspace re-initialization: on a simulated RTX PRO
    6000, ``fp4bench ab`` with 0.7.2.post1 on A and 0.7.4 on B judges exactly the stream-K tactics
    PASS (improved) -- the memset is a fifth of a launch (fp4sim_world), -17 % against a guard band
    of 4 % -- and every other row (the data-parallel tactics, the default row) PASS, not improved;
    the stack difference is the FlashInfer version."""
    res, js = _ab(tmp_path, "RTX PRO 6000")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    rows = {}
    for r in js["benchmarks"]:
        label, shape = re.search(r"flashinfer-cutlass-(t\d\d|default)-sim-tiny-b1-.*-(\w+)-m\d+n\d+k\d+$",
                                 r["name"]).groups()
        rows[label, shape] = r
    tactics = sorted({label for label, _ in rows} - {"default"})
    assert tactics and set(rows) == {(t, s) for t in tactics + ["default"] for _, s in rows}, sorted(rows)
    # the simulated build's configs are the first of the released SM120 list (fakes/flashinfer.py)
    streamk = {t for t in tactics if SM120_CONFIGS[int(t[1:])].endswith("_streamk")}
    assert streamk and streamk != set(tactics), tactics
    improved = set(re.findall(r"PASS \(improved\)\s+(flashinfer-cutlass-\S+)", res.stdout))
    for (label, shape), r in rows.items():
        assert r["status"] == "PASS" and r["evidence"]["decision"] == "PASS", r
        faster = label in streamk
        assert (r["name"] in improved) == faster and ("improved" in r["reason"]) == faster, \
            (label, shape, r["delta_pct"], r["interval_pct"], r["reason"])
    assert js["counts"].get("FAIL", 0) == 0 and js["exit_code"] == 0, js["counts"]
    assert {"key": "flashinfer", "old": "0.7.2.post1", "new": "0.7.4"} in js["changes"], js["changes"]


MOE_64 = ("--fp4-batches", "64", "--fp4-backends", "flashinfer-cutlass-moe-nvfp4", "--fp4-kinds", "moe")
FOUR_OVER_SIX = {"FLASHINFER_NVFP4_4OVER6": "1"}


def _moe_rows(tmp_path: Path, name: str, flashinfer: str, env: dict[str, str]) -> tuple[list[dict], dict]:
    """The MoE cases' ``extra_info`` and the fingerprint from the line log of a simulated B200 run."""
    path = tmp_path / f"{name}.lines.jsonl"
    res = bench(tmp_path, *MOE_64, "--benchmark-disable", "--fp4-log", str(path), flashinfer=flashinfer, env=env)
    assert res.returncode == 0, res.stdout[-3000:]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r["extra_info"] for r in records if r["type"] == "case"]
    assert rows and all(r["check"] == "ok" for r in rows), rows
    return rows, next(r["fingerprint"] for r in records if r["type"] == "header")


def test_the_4over6_environment_changes_0_7_2s_moe_output_within_the_bound_and_0_7_4_pins_it(tmp_path):
    """``FLASHINFER_NVFP4_4OVER6=1``: 0.7.2.post1's fused MoE re-quantizes its intermediate with
    the 4over6 recipe (it has no ``nvfp4_4over6`` keyword); 0.7.4 gets ``nvfp4_4over6=None`` from
    the adapter and computes what it computes without the variable. The 4over6 recipe keeps every
    element within one E2M1 step of the default recipe's, which the derived MoE bound admits
    (reference_moe ``_FLIP``), so the rows PASS either way: the change shows as a lower SQNR
    against the same-bytes reference and as the fingerprint's ``flashinfer_numerics_env``."""
    plain, fp_plain = _moe_rows(tmp_path, "plain", "0.7.2.post1", {})
    old, fp_old = _moe_rows(tmp_path, "old", "0.7.2.post1", FOUR_OVER_SIX)
    new, fp_new = _moe_rows(tmp_path, "new", "0.7.4", FOUR_OVER_SIX)
    sqnr = {k: [r["sqnr_db"] for r in rows] for k, rows in (("plain", plain), ("old", old), ("new", new))}
    assert sqnr["new"] == sqnr["plain"], sqnr  # pinned: bit-identical output
    assert all(o < p for o, p in zip(sqnr["old"], sqnr["plain"])), sqnr  # another recipe
    assert fp_plain["flashinfer_numerics_env"] is None
    assert fp_old["flashinfer_numerics_env"] == fp_new["flashinfer_numerics_env"] == "FLASHINFER_NVFP4_4OVER6=1"


@pytest.mark.parametrize("flashinfer", FLASHINFER)
def test_a_mismatch_of_the_nvfp4_moe_names_the_4over6_environment_where_the_kernel_obeys_it(tmp_path, flashinfer):
    """A mismatching NVFP4 MoE row (here: a build that reads gate and up the wrong way round) names
    ``FLASHINFER_NVFP4_4OVER6=1`` as a possible cause under 0.7.2.post1, which reads it; under 0.7.4
    the adapter pinned the recipe, and the message does not name it."""
    res = bench(tmp_path, *MOE_64, "--benchmark-disable", flashinfer=flashinfer, fault="gate_up_swapped",
                env=FOUR_OVER_SIX)
    rows = of(res, "flashinfer-cutlass-moe-nvfp4")
    assert rows and res.returncode == 1 and all(s == "FAILED" for s, _ in rows.values()), res.stdout[-3000:]
    # each failed case's message, as the failure section prints it
    messages = set(re.findall(r"flashinfer-cutlass-moe-nvfp4 \[default\] on \S+: mismatch: .*$", unwrapped(res.stdout),
                              re.M))
    assert len(messages) == len(rows), res.stdout[-3000:]
    named = flashinfer == "0.7.2.post1"
    assert all(("FLASHINFER_NVFP4_4OVER6=1" in m) == named for m in messages), messages


LATER_OUTCOMES = {
    # fault of the fake FlashInfer dense GEMM: (the kind it must fail as, extra options)
    "late": ("replay mismatch", ()),                        # zeros from its third launch on
    "copy": ("copy mismatch", ("--fp4-min-copies", "2")),   # wrong on a rotating copy
    "padding": ("reads scale padding", ()),                 # adds a padding entry of its scales
}


@pytest.mark.parametrize("fault", sorted(LATER_OUTCOMES))
def test_each_fault_of_a_later_launch_is_named_and_the_clean_rows_pass(tmp_path, fault):
    kind, extra = LATER_OUTCOMES[fault]
    res = bench(tmp_path, "--fp4-batches", "1", "--fp4-backends", "flashinfer-cutlass,cublaslt-v2", "--fp4-kinds",
                "dense", "--benchmark-disable", *extra, fault=fault)
    bad, clean = of(res, "flashinfer-cutlass"), of(res, "cublaslt-v2")
    assert bad and clean, res.stdout[-3000:]
    assert all(s == "FAILED" for s, _ in bad.values()), bad
    assert all(s == "PASSED" for s, _ in clean.values()), clean
    named = re.findall(rf"flashinfer-cutlass \[\S+\] on \S+: {kind}: ", unwrapped(res.stdout))
    assert len(named) >= len(bad), res.stdout[-3000:]
    assert res.returncode == 1
