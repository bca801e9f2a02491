"""``fp4bench report`` / ``shapes`` / ``compare --verdict-json --markdown`` and the machine-readable outputs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fp4bench.cli import main
from fp4bench.gate.baseline import load_baseline, parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.verdict import Status
from fp4bench.gate.verdict_json import validate
from fp4bench.report.data import run_data, split_tactic
from fp4bench.report.machine import results_csv, verdict_json, verdict_markdown, write_step_summary
from fakes.paths import ROOT

APPROVED = ROOT / "baselines" / "nvidia-h200" / "approved.json"

pytest.importorskip("matplotlib")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def _dense(rng, backend: str, m: int, tactic: str = "default", median: float | None = None) -> dict:
    n, k = 4096, 6144
    flops, nbytes = 2 * m * n * k, (m * k + n * k) * 0.5625 + m * n * 2
    t = median if median is not None else nbytes / 4.0e12 * rng.uniform(1.2, 2.0)
    pid = f"glm-5-b{m}-tp1-uniform-shared_gate_up-m{m}n{n}k{k}"
    extra = {"backend": backend, "tactic": tactic, "problem": pid, "kind": "dense", "model": "glm-5", "batch": m,
             "role": "shared_gate_up", "act_format": "nvfp4", "weight_format": "nvfp4", "m": m, "n": n, "k": k,
             "flops": flops, "bytes": nbytes, "power_w": float(rng.uniform(200, 600)), "power_max_w": 650.0,
             "sm_clock_mhz": 1965.0, "sm_clock_min_mhz": 1900, "sm_clock_max_mhz": 1980, "throttled": m == 64}
    return bench_entry(f"bench/t.py::test_dense[{backend}-{tactic}-{pid}]", samples(rng, t, 0.01, 12), extra)


def _b200_run(seed: int) -> dict:
    """A synthetic sweep: 2 backends at 5 M values, one backend with 4 tiles of which one is refused."""
    rng = np.random.default_rng(seed)  # sampling noise differs per run; the true medians do not
    speed = iter(np.random.default_rng(100).uniform(1.2, 2.0, 20))
    benches, avail = [], {}
    for m in (1, 16, 64, 256, 1024):
        nbytes = (m * 6144 + 4096 * 6144) * 0.5625 + m * 4096 * 2
        benches.append(_dense(rng, "flashinfer-cutlass", m, median=nbytes / 4e12 * next(speed)))
        for t in ("t0:128x128", "t1:128x256", "t2:256x128"):
            benches.append(_dense(rng, "cutlass-tiles", m, t, median=nbytes / 4e12 * next(speed)))
            avail[f"cutlass-tiles|{benches[-1]['extra_info']['problem']}|{t}"] = "ok"
        avail[f"cutlass-tiles|{benches[-1]['extra_info']['problem']}|t3:256x256"] = "unsupported: smem too small"
    from dataclasses import replace
    return bench_json(benches, replace(H200, gpu_name="NVIDIA B200", gpu_slug="nvidia-b200"), avail)


def test_report_of_the_committed_h200_baseline(tmp_path):
    assert main(["report", str(APPROVED), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    images = sorted(p.name for p in tmp_path.glob("*.png"))
    assert images == ["power_clock.png", "roofline.png", "tactics_flashinfer-cutlass-moe.png", "throughput_vs_m.png"]
    for name in images:
        w, h = _png_size(tmp_path / name)
        assert w > 400 and h > 250
        assert f"]({name})" in md
    # the fastest tactic per problem in the table is the one with the lowest median of raw samples
    base = load_baseline(APPROVED)
    glm = [r for r in base.benchmarks.values()
           if r.extra_info["problem"].startswith("glm-5") and r.extra_info["kind"] == "moe"]
    best = min(glm, key=lambda r: r.median)
    assert "| flashinfer-cutlass-moe | glm-5 moe | 64 |" in md
    assert best.extra_info["tactic"] in md
    refused = sum(1 for v in base.availability.values() if v != "ok")
    assert f"{refused} tactics the library refused" in md
    throttled = sum(bool(r.extra_info.get("throttled")) for r in base.benchmarks.values())
    assert f"{throttled} of {len(base.benchmarks)} cases throttled" in md
    assert sum(p.stat().st_size for p in tmp_path.glob("*.png")) < 600_000  # small enough to commit


def test_rates_come_from_the_raw_median_and_the_peak_table(tmp_path):
    run = parse_baseline(_b200_run(1), "synthetic")
    data = run_data([run])
    assert data.peaks is not None and data.peaks.name == "B200"
    for row in data.rows:
        rec = run.benchmarks[row.fullname]
        median = float(np.median(rec.samples))
        assert row.median_s == pytest.approx(median)
        assert row.tflops == pytest.approx(rec.extra_info["flops"] / median / 1e12)
        assert row.pct_bandwidth == pytest.approx(100 * rec.extra_info["bytes"] / median / 1e12 / 8.0)
    assert {(u.backend, u.tactic) for u in data.unsupported} == {("cutlass-tiles", "t3:256x256")}
    assert len(data.unsupported) == 5  # one per M


def test_report_with_a_sweep_and_a_baseline_has_every_plot(tmp_path):
    base = write(tmp_path / "base.json", _b200_run(1))
    slow = _b200_run(2)
    for b in slow["benchmarks"]:
        if b["extra_info"]["backend"] == "flashinfer-cutlass" and b["extra_info"]["m"] == 64:
            b["stats"]["data"] = [x * 1.3 for x in b["stats"]["data"]]  # a 30% slowdown in one case
    now = write(tmp_path / "now.json", slow)
    out = tmp_path / "rep"
    assert main(["report", str(now), "--baseline-file", str(base), "--out", str(out)]) == 0
    names = {p.name for p in out.glob("*.png")}
    assert {"delta_vs_baseline.png", "throughput_vs_m.png", "roofline.png", "tactics_cutlass-tiles.png",
            "power_clock.png"} <= names
    md = (out / "report.md").read_text()
    assert md.index("## Verdict against the baseline") < md.index("## Throughput")
    first_row = next(line for line in md.splitlines() if line.startswith("| **"))
    assert "FAIL" in first_row and "flashinfer-cutlass-default-glm-5-b64" in first_row
    assert "5 × smem too small" in md


def test_report_refuses_mixed_gpus_and_bad_files(tmp_path, capsys):
    h = write(tmp_path / "h.json", bench_json([_dense(np.random.default_rng(0), "x", 1)]))
    b = write(tmp_path / "b.json", _b200_run(0))
    assert main(["report", str(h), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "one report covers one GPU model" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert main(["report", str(tmp_path / "bad.json"), "--out", str(tmp_path / "o")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_split_tactic():
    assert split_tactic("g1-057:128x16x512B+g2-default") == ("GEMM1", "057:128x16x512B")
    assert split_tactic("g1-default+g2-003:64x16") == ("GEMM2", "003:64x16")
    assert split_tactic("g1-default+g2-default") == ("", "g1-default+g2-default")
    assert split_tactic("default") == ("", "default")


def _result(tmp_path):
    base = load_baseline(write(tmp_path / "base.json", _b200_run(1)))
    now_raw = _b200_run(2)
    dropped = now_raw["benchmarks"].pop(0)["fullname"]
    now_raw["benchmarks"][0]["stats"]["data"] = [x * 1.5 for x in now_raw["benchmarks"][0]["stats"]["data"]]
    now = parse_baseline(now_raw, "now")
    return compare(base, now.as_current(), now.availability, current_fingerprint=now.fingerprint), dropped, now


def test_verdict_json_and_markdown_put_failures_first(tmp_path):
    result, dropped, _ = _result(tmp_path)
    doc = verdict_json(result, baseline="base.json")
    assert doc["exit_code"] == 1 and doc["counts"]["MISSING"] == 1 and doc["counts"]["FAIL"] == 1
    statuses = [v["status"] for v in doc["benchmarks"]]
    assert statuses[:2] == ["FAIL", "MISSING"] and set(statuses[2:]) <= {"PASS", "AMBIGUOUS"}
    assert doc["benchmarks"][1]["name"] == dropped and doc["benchmarks"][1]["fails_gate"]
    assert doc["benchmarks"][0]["delta_pct"] == pytest.approx(50, abs=5)
    json.dumps(doc, allow_nan=False)  # strict JSON: no NaN/Infinity
    md = verdict_markdown(result, baseline="base.json", limit=3)
    rows = [line for line in md.splitlines() if line.startswith("| ")][1:]
    assert rows[0].startswith("| **FAIL**") and rows[1].startswith("| **MISSING**")
    assert "more rows (none failing)" in md


def test_step_summary_only_when_github_sets_it(tmp_path):
    assert write_step_summary("x", env={}) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert write_step_summary("### verdict", env={"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "earlier step\n### verdict\n"


def test_compare_json_markdown_and_summary(tmp_path, capsys, monkeypatch):
    base = write(tmp_path / "base.json", _b200_run(1))
    now_raw = _b200_run(2)
    now_raw["benchmarks"][3]["stats"]["data"] = [x * 1.5 for x in now_raw["benchmarks"][3]["stats"]["data"]]
    now = write(tmp_path / "now.json", now_raw)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc = main(["compare", str(base), str(now), "--verdict-json", str(tmp_path / "v.json"), "--markdown", "-"])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.startswith("### ❌ fp4bench: regression (exit 1)")
    doc = validate(json.loads((tmp_path / "v.json").read_text()))
    assert doc["source"] == "gate" and doc["exit_code"] == 1 and doc["benchmarks"][0]["status"] == Status.FAIL.value
    assert summary.read_text().startswith("### ❌ fp4bench: regression")


def test_results_csv_has_one_line_per_case(tmp_path):
    result, _, now = _result(tmp_path)
    rows = run_data([now]).rows
    text = results_csv(rows, {v.name: v for v in result.verdicts})
    lines = text.splitlines()
    assert len(lines) == len(rows) + 1 and lines[0].startswith("fullname,backend,tactic")
    assert sum(",FAIL," in line for line in lines) == 1


def test_shapes_glm5_batch_512(capsys):
    assert main(["shapes", "--models", "glm-5", "--batches", "512", "--gpu", "b200"]) == 0
    out = capsys.readouterr().out
    assert "B200: ridge point 1125 FLOP/B for nvfp4" in out  # 9000 TFLOP/s / 8 TB/s
    gate_up = next(line for line in out.splitlines() if " gate_up " in line and "shared" not in line)
    cols = gate_up.split()
    # 512 tokens × top-8 = 4096 routed rows over 256 experts = 16 tokens per expert, N=2·I=4096, K=H=6144
    assert cols[:6] == ["512", "gate_up", "4096", "4096", "6144", "16.00"]
    assert 50 < float(cols[8]) < 60 and cols[9] == "bandwidth"  # ≈ 3.56·16 FLOP/B, far below the ridge
    assert main(["shapes", "--models", "nope"]) == 2


def test_plot_labels_read_the_recorded_model_and_role_not_the_problem_id():
    run = parse_baseline(_b200_run(1), "synthetic")
    for row in run_data([run]).rows:
        rec = run.benchmarks[row.fullname]
        assert row.label == f"{rec.extra_info['model']} {rec.extra_info['role']}" == "glm-5 shared_gate_up"
        assert row.m == rec.extra_info["m"]
