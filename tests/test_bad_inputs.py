"""The bad-input table: every way a user (or a broken run) could fool the gate, lose a baseline
or crash the tool, one row each, with the exit code and the message it must give.

Front ends and their codes: ``fp4bench`` CLI rows exit 2 on bad input (1 = the gate fails);
``pytest`` rows exit 4 on a usage error, 1 when cases fail (each failure names its cause);
API rows raise ``ValueError`` (``BaselineError`` is one) with the message. No row may print a
traceback: a user error is one line.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

import fp4bench.plugin.session
from fakes.benchjson import B200, H200, bench_entry, bench_json, samples
from fp4bench.backends.base import Availability, Prepared, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16
from fp4bench.cli import main as cli_main
from fp4bench.formats.nvfp4 import NVFP4, nvfp4_dequantize, nvfp4_quantize
from fp4bench.formats.swizzle import unswizzle_128x4
from fp4bench.gate.store import APPROVED, candidate_path
from fakes.wrapped import unwrapped
from fakes.pytest_run import STEADY_RUN, TINY

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry", "quick_runs")

MED = 10e-6
NAMES = ("b::t[0]", "b::t[1]")


# --- backends loaded into the inner pytest runs with --fp4-plugin test_bad_inputs ---------------


class RaisingAvailability(TorchBF16):
    name = "broken-availability"
    kinds = frozenset({"dense"})

    def availability(self, device: torch.device) -> Availability:
        raise RuntimeError("driver exploded")


class Float64Output(TorchBF16):
    """Correct values, returned as a new float64 tensor instead of the bf16 output."""

    name = "float64-output"
    kinds = frozenset({"dense"})

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        return super().run(prepared, tactic).double()


class FlatOutput(TorchBF16):
    """Correct values as ``[N]`` instead of ``[M, N]``: at M = 1 it broadcasts against the reference."""

    name = "flat-output"
    kinds = frozenset({"dense"})

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        return super().run(prepared, tactic).reshape(-1)


class RaisingPrepare(TorchBF16):
    name = "raising-prepare"
    kinds = frozenset({"dense"})

    def prepare(self, problem, operands, device) -> Prepared:
        raise RuntimeError("out of workspace\nsecond line of the message")


class RaisingRun(TorchBF16):
    name = "raising-run"
    kinds = frozenset({"dense"})

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        raise ValueError("bad launch")


BACKENDS = [RaisingAvailability(), Float64Output(), FlatOutput(), RaisingPrepare(), RaisingRun()]


# --- file builders ------------------------------------------------------------------------------


SLOWED = {"torch-bf16": "torch-bf16 (torch.mm + test-only slowdown 0.05)"}


def _file(benches: list[dict], fingerprint=H200, sweep: dict | None = None, **kw: Any) -> dict:
    data = bench_json(benches, fingerprint=fingerprint, **kw)
    if sweep is not None:
        data["fp4bench"]["sweep"].update(sweep)
    return data


def _runs(factor: float = 1.0, n: int = 30, seed: int = 0, extra: dict | None = None,
          names: tuple[str, ...] = NAMES, sigma: float = 0.01) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [bench_entry(name, samples(rng, MED * factor, sigma, n), extra) for name in names]


def _with_data(data: dict, values: list) -> dict:
    for b in data["benchmarks"]:
        b["stats"]["data"] = list(values)
    return data


def _put(tmp: Path, name: str, data: dict | str) -> str:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = cli_main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


# --- fp4bench compare ---------------------------------------------------------------------------

GOOD = _file(_runs())

# (id, new-file builder or None for GOOD, base-file builder or None for GOOD, extra args, exit, message)
COMPARE_ROWS: list[tuple[str, Callable | None, Callable | None, list[str], int, str]] = [
    ("all-zero samples", lambda: _with_data(_file(_runs()), [0.0] * 30), None, [], 2,
     "invalid sample(s) (times must be finite numbers of seconds > 0), e.g. [0.0, 0.0, 0.0]"),
    ("boolean samples", lambda: _with_data(_file(_runs()), [True] * 30), None, [], 2,
     "invalid sample(s) (times must be finite numbers of seconds > 0), e.g. [True, True, True]"),
    ("negative sample", lambda: _with_data(_file(_runs()), [1e-5] * 29 + [-1e-5]), None, [], 2, "e.g. [-1e-05]"),
    ("NaN sample", lambda: _with_data(_file(_runs()), [1e-5] * 29 + [float("nan")]), None, [], 2, "e.g. [nan]"),
    ("zero baseline", None, lambda: _with_data(_file(_runs()), [0.0] * 30), [], 2, "invalid sample(s)"),
    ("too few samples, 2x slower", lambda: _file(_runs(2.0, n=3)), None, [], 1,
     "too few samples (baseline 30, current 3; need >= 5)"),
    ("too few samples accepted", lambda: _file(_runs(2.0, n=3)), None, ["--allow-ambiguous"], 3,
     "INCOMPLETE: nothing judged: judged 0 of 2 expected benchmarks (2 compared, not judged: INVALID or too few "
     "samples)"),
    ("clock anomaly everywhere", lambda: _file(_runs(2.0, extra={"clock_anomaly": "SM clock 345 MHz"})), None, [],
     1, "current run clock anomaly: SM clock 345 MHz; timing not judged"),
    ("floor nan", None, None, ["--floor", "nan"], 2, "percentage must be in [0, 1000), got nan"),
    ("sweep is a string", None, lambda: _edit(GOOD, lambda d: d["fp4bench"].update(sweep="all")), [], 2,
     "'fp4bench.sweep' must be an object, got str 'all'"),
    ("verdicts is a list", None, lambda: _edit(GOOD, lambda d: d["fp4bench"].update(verdicts=["PASS"])), [], 2,
     "'fp4bench.verdicts' must be an object, got list ['PASS']"),
    ("verdict count is text", None, lambda: _file(_runs(), verdicts={"FAIL": "none"}), [], 2,
     "'fp4bench.verdicts['FAIL']' must be a count, got 'none'"),
    ("noise_floor is a list", None, lambda: _file(_runs(extra={"noise_floor": [0.01]})), [], 2,
     "extra_info['noise_floor'] must be a relative number >= 0 (0.02 = 2 %), got [0.01]"),
    ("clock is an object", None, lambda: _file(_runs(extra={"sm_clock_mhz": {"median": 1980}})), [], 2,
     "extra_info['sm_clock_mhz'] must be a number or a list of numbers (MHz), got {'median': 1980}"),
    ("kernels is a number", None, lambda: _file(_runs(extra={"kernels": 3})), [], 2,
     "extra_info['kernels'] must be a list of names, got 3"),
    ("200k-deep JSON", None, lambda: "[" * 200_000 + "]" * 200_000, [], 2, "nests JSON too deeply"),
    ("L2 mode differs", lambda: _file(_runs(), sweep={"l2": "hot"}), lambda: _file(_runs(), sweep={"l2": "cold"}),
     [], 2, "the baseline was timed with l2='cold', this run with l2='hot'"),
    ("timer differs", lambda: _file(_runs(), sweep={"timer": "cpu"}), lambda: _file(_runs(), sweep={"timer": "graph"}),
     [], 2, "the baseline was timed with timer='graph', this run with timer='cpu'"),
    ("integer sample beyond the float range", lambda: _with_data(_file(_runs()), [10 ** 400] * 30), None, [], 2,
     "new.json: benchmark 'b::t[0]' has 30 invalid sample(s) (times must be finite numbers of seconds > 0), "
     "e.g. [100000000000000000000"),
    ("integer noise_floor beyond the float range", None, lambda: _file(_runs(extra={"noise_floor": 10 ** 400})), [],
     2, "base.json: benchmark 'b::t[0]' extra_info['noise_floor'] must be a relative number >= 0"),
    ("line log with an array line", lambda: _line_log(["[1, 2]"]), None, [], 2,
     "new.json: line 2 is a JSON list, not an object (a header, case or end record)"),
    ("line log whose planned is a number", lambda: _line_log([], planned=5), None, [], 2,
     "new.json: line 1 (the header): 'planned' must be a list of benchmark names, got 5"),
    ("line log case with samples an object", lambda: _line_log(['{"type": "case", "fullname": "b::t[0]", '
                                                                 '"samples": {"a": 1}}']), None, [], 2,
     "new.json: line 2: 'availability' must be an object and 'samples' a list"),
    ("baseline ran a test-only backend", None, lambda: _file(_runs(), sweep={"test_only": SLOWED}), [], 2,
     "the baseline ran test-only backends (torch-bf16: torch-bf16 (torch.mm + test-only slowdown 0.05)); "
     "it is not a reference"),
]


def _line_log(lines: list[str], planned: Any = NAMES) -> str:
    head = {"type": "header", "kind": "fp4bench-line-log", "fingerprint": H200.to_dict(), "sweep": {},
            "planned": planned}
    return "\n".join([json.dumps(head), *lines, '{"type": "end"}']) + "\n"


@pytest.mark.parametrize(("new", "base", "args", "code", "message"), [r[1:] for r in COMPARE_ROWS],
                         ids=[r[0] for r in COMPARE_ROWS])
def test_compare_rows(tmp_path, capsys, new, base, args, code, message):
    b = _put(tmp_path, "base.json", base() if base else GOOD)
    n = _put(tmp_path, "new.json", new() if new else GOOD)
    rc, out, err = _cli(capsys, ["compare", b, n, *args])
    assert rc == code, out + err
    assert message in (err if code == 2 else out)


def test_compare_unreadable_file(tmp_path, capsys, monkeypatch):
    b = _put(tmp_path, "base.json", GOOD)
    real = Path.read_text

    def read_text(self, *a, **kw):
        if self.name == "base.json":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    rc, _, err = _cli(capsys, ["compare", b, b])
    assert rc == 2 and f"baseline file {b} cannot be read: Permission denied" in err
    rc, _, err = _cli(capsys, ["compare", str(tmp_path), b])
    assert rc == 2 and f"baseline file {tmp_path} is not a file" in err


def test_compare_baseline_of_unknown_unit_names_it_and_collapses_drift(tmp_path, capsys):
    """An unchanged stack on another (or unrecorded) unit: every kernel +1 %, one window a side,
    each interval below the floor but not below the guard band. The header says the unit is
    unknown; the 20 AMBIGUOUS verdicts are one explained line, not 20 rows; nothing fails."""
    names = tuple(f"b::t[{i}]" for i in range(20))
    b = _put(tmp_path, "base.json", _file(_runs(1.0, names=names, sigma=0.002)))  # no gpu_uuid
    n = _put(tmp_path, "new.json", _file(_runs(1.01, seed=1, names=names, sigma=0.002),
                                         fingerprint=replace(H200, gpu_uuid="GPU-1234")))
    rc, out, _ = _cli(capsys, ["compare", b, n])
    assert rc == 0, out
    lines = out.splitlines()
    from fp4bench.report.tables import OTHER_UNIT

    head = " ".join(ln.strip() for ln in lines[:6])
    assert OTHER_UNIT in out and "another or unknown GPU unit: unit offset in the error term" in head
    assert "baseline has 1 window: less sensitive, re-record it" in out
    assert sum(ln.startswith("AMBIGUOUS") for ln in lines) == 1
    assert "AMBIGUOUS (20, not listed above): Δ +" in out and "each interval below the 5% floor" in out
    assert "it does not fail the gate" in out and "summary: 20 AMBIGUOUS → no regression (exit 0)" in out


# --- fp4bench baseline approve ------------------------------------------------------------------


def _approved(tmp_path: Path) -> Path:
    p = tmp_path / "root" / "nvidia-h200" / APPROVED
    _put(tmp_path, "root/nvidia-h200/approved.json", GOOD)
    return p


def _fingerprint_dict(**kw) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        d["fp4bench"]["fingerprint"].update(kw)
    return edit


# (id, candidate builder, extra args, exit, message)
APPROVE_ROWS: list[tuple[str, Callable[[], dict], list[str], int, str]] = [
    ("slug escapes the root", lambda: _edit(GOOD, _fingerprint_dict(gpu_slug="../../x")), [], 2,
     "bad fingerprint: gpu_slug '../../x' does not match gpu_name 'NVIDIA H200' (its slug is 'nvidia-h200')"),
    ("B200 relabelled as H200", lambda: _edit(_file(_runs(), fingerprint=B200),
                                              _fingerprint_dict(gpu_slug="nvidia-h200")), ["--force"], 2,
     "gpu_slug 'nvidia-h200' does not match gpu_name 'NVIDIA B200'"),
    ("subset shrinks coverage", lambda: _file(_runs(names=NAMES[:1])), [], 2,
     "has 1 benchmarks, 1 of the 2 in"),
    ("other L2 mode than the approved", lambda: _file(_runs(), sweep={"l2": "hot"}), [], 2, "l2="),
    ("test-only backend, even forced", lambda: _file(_runs(), sweep={"test_only": SLOWED}), ["--force"], 2,
     "its run measured test-only backends (torch-bf16: torch-bf16 (torch.mm + test-only slowdown 0.05)); "
     "a test of the gate can never be approved, not even with --force"),
    ("poisoned context", lambda: _file(_runs(), clean=False), [], 2, "its run was not clean"),
    ("integer sample beyond the float range", lambda: _with_data(_file(_runs()), [10 ** 400] * 30), [], 2,
     "cand.json: benchmark 'b::t[0]' has 30 invalid sample(s)"),
]


def _edit(data: dict, fn: Callable[[dict], None]) -> dict:
    d = json.loads(json.dumps(data))
    fn(d)
    return d


@pytest.mark.parametrize(("cand", "args", "code", "message"), [r[1:] for r in APPROVE_ROWS],
                         ids=[r[0] for r in APPROVE_ROWS])
def test_approve_rows(tmp_path, capsys, cand, args, code, message):
    approved = _approved(tmp_path)
    _put(tmp_path, "root/nvidia-h200/approved.json", _file(_runs(), sweep={"l2": "cold"}))
    before = approved.read_bytes()
    c = _put(tmp_path, "cand.json", cand())
    rc, out, err = _cli(capsys, ["baseline", "approve", c, "--baselines", str(tmp_path / "root"), *args])
    assert rc == code, out + err
    assert message in err
    assert approved.read_bytes() == before  # the approved baseline is untouched
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


def test_approve_shows_what_a_forced_subset_drops(tmp_path, capsys):
    approved = _approved(tmp_path)
    c = _put(tmp_path, "cand.json", _file(_runs(names=NAMES[:1])))
    rc, _, err = _cli(capsys, ["baseline", "approve", c, "--baselines", str(tmp_path / "root")])
    assert rc == 2 and f"approving would stop gating them (--force to shrink the baseline):\n  {NAMES[1]}" in err
    rc, out, _ = _cli(capsys, ["baseline", "approve", c, "--baselines", str(tmp_path / "root"), "--force"])
    assert rc == 0 and f"no longer gated (1 benchmarks of the previous baseline):\n  {NAMES[1]}" in out
    assert json.loads(approved.read_text())["approval"]["forced"] is True


@pytest.mark.parametrize("how", ["a file where the GPU folder should be", "read-only folder"])
def test_approve_into_an_unwritable_folder(tmp_path, capsys, monkeypatch, how):
    """A file where the GPU folder should be is refused before anything is written (exit 2); a
    write the system refuses is exit 4 naming the file, and nothing is left behind."""
    root = tmp_path / "root"
    if how == "read-only folder":  # root ignores permission bits, so the OS refusal is simulated
        from fp4bench import outputs

        def refuse(*a, **kw):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(outputs, "_write_file", refuse)
        code, message = 4, "cannot write " + str(root / "nvidia-h200" / "approved.json") + ": Permission denied"
    else:
        _put(tmp_path, "root/nvidia-h200", "not a folder")
        code, message = 2, "is not a folder"
    c = _put(tmp_path, "cand.json", GOOD)
    rc, _, err = _cli(capsys, ["baseline", "approve", c, "--baselines", str(root)])
    assert rc == code and message in err and "Traceback" not in err
    assert sorted(p.name for p in root.rglob("*")) == ([] if code == 4 else ["nvidia-h200"])


@pytest.mark.parametrize(("device", "message"), [
    ("foo", "fp4bench env: --device: 'foo' is not a torch device"),
    ("meta", "fp4bench env: --device: 'meta': fp4bench runs on cpu or cuda devices, not meta"),
])
def test_env_with_a_bad_device(capsys, device, message):
    rc, _, err = _cli(capsys, ["env", "--device", device])
    assert rc == 2 and message in err


def test_compare_refuses_a_fifo_without_reading_it(tmp_path, capsys):
    """A FIFO (or any non-regular file) is refused up front: opening it would block until a
    writer came."""
    import os
    import threading

    b = _put(tmp_path, "base.json", GOOD)
    fifo = tmp_path / "new.json"
    os.mkfifo(fifo)
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(cli_main(["compare", b, str(fifo)])), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # blocked in open(): a writer's open and close lets it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("compare blocked reading a FIFO")
    _, err = capsys.readouterr()
    assert got == [2] and f"baseline file {fifo} is not a file" in err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["shapes", "--batches", "100000000000"], 2,
     "fp4bench shapes: batch: batch sizes must be in 1..65536, got 100000000000 in '100000000000'"),
])
def test_batch_beyond_the_range_is_refused_before_any_allocation(capsys, argv, code, message):
    rc, _, err = _cli(capsys, argv)
    assert rc == code and message in err


@pytest.mark.parametrize(("args", "message"), [
    (["--case-timeout", "nan"], "argument --case-timeout: must be a finite number of seconds > 0, got nan"),
    (["--case-timeout", "0"], "argument --case-timeout: must be a finite number of seconds > 0, got 0"),
    (["--seed", str(10 ** 30)], "argument --seed: seed must be in 0..2**63-1, got 10000000000"),
], ids=["case-timeout nan", "case-timeout 0", "seed 10**30"])
def test_ab_values_refused_before_any_worker_starts(capsys, monkeypatch, args, message):
    import fp4bench.run.worker.pool as pool

    def no_worker(*a, **kw):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(pool.subprocess, "Popen", no_worker)
    rc, _, err = _cli(capsys, ["ab", "--a", "python3", "--b", "python3", *args])
    assert rc == 2 and message in err


def _no_torch_python() -> str:
    """A Python interpreter without torch: the system one, with this venv's packages kept off."""
    import shutil
    import subprocess

    for cand in ("/usr/bin/python3", shutil.which("python3") or ""):
        if cand and subprocess.run([cand, "-c", "import torch"], capture_output=True).returncode != 0:
            return cand
    pytest.skip("every python3 here has torch")


# (id, interpreter (a callable of tmp_path), init message, in a real process, what the one-line
# error must say). A worker that starts and then refuses its init message is the real child code
# answering in this process (``sim_workers``, tests/fakes/inproc_worker.py): a real one would
# import torch first, seconds of which the refusal is not about.
WORKER_ROWS: list[tuple[str, Callable[[Path], str], dict, bool, str]] = [
    ("non-executable interpreter", lambda tmp: _put(tmp, "python", "not a program"), {}, True,
     "side A: cannot start {python}: Permission denied"),
    ("interpreter without torch", lambda tmp: _no_torch_python(), {}, True,
     "side A process died during start: exited with status 1; {python} said: ModuleNotFoundError: No module "
     "named 'torch'"),
    ("bad device", lambda tmp: sys.executable, {"device": "foo"}, False,
     "side A ({python}) could not start: RuntimeError: Expected one of cpu, cuda"),
    ("plugin that does not import", lambda tmp: sys.executable, {"plugins": ["no_such_mod"]}, False,
     "side A ({python}) could not start: ValueError: --fp4-plugin: cannot import backend module 'no_such_mod'"),
    ("interpreter that dies silently", lambda tmp: "/bin/false", {}, True,
     "side A process died during start: exited with status 1; /bin/false wrote nothing (no line on stdout or "
     "stderr)"),
    ("not a Python interpreter", lambda tmp: "/bin/echo", {}, True,
     "side A: /bin/echo is not an fp4bench worker: it answered '-m fp4bench.run.worker' to start"),
]


@pytest.mark.parametrize(("python", "init", "real", "message"), [r[1:] for r in WORKER_ROWS],
                         ids=[r[0] for r in WORKER_ROWS])
def test_worker_that_cannot_start_says_why_in_one_line(tmp_path, capfd, request, python, init, real, message):
    from fp4bench.run.worker.interpreter import interpreter
    from fp4bench.run.worker.pool import WorkerLost, WorkerSpec, spawn

    exe = interpreter(python(tmp_path))
    if not real:
        request.getfixturevalue("sim_workers")
    w = spawn(WorkerSpec(python=exe, init=init, start_timeout_s=120), "side A")
    assert (type(w).__name__ == "Worker") == real
    with pytest.raises(WorkerLost) as ei:
        w.start()
    text = str(ei.value)
    assert message.format(python=exe) in text and "\n" not in text and "Expecting value" not in text
    _, err = capfd.readouterr()
    assert "Traceback" not in err  # the child's traceback is not passed through


def test_shapes_on_an_ascii_only_stdout(monkeypatch):
    import io
    import sys

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    rc = cli_main(["shapes", "--batches", "1"])
    sys.stdout.flush()
    assert rc == 0 and b"tok/expert = batch?top_k/E" in raw.getvalue()


# --- storage API --------------------------------------------------------------------------------


def test_two_runs_in_the_same_second_get_different_candidates(tmp_path):
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    a, b = candidate_path(tmp_path, "cpu", now), candidate_path(tmp_path, "cpu", now)
    assert a.name == "20260102T030405Z.json" and b.name == "20260102T030405Z-1.json"
    assert a.exists() and b.exists()  # reserved on disk, so a third process cannot take them either


@pytest.mark.parametrize("slug", ["../../x", "nvidia-h200/../../x", "", "NVIDIA H200"])
def test_candidate_path_stays_under_the_root(tmp_path, slug):
    with pytest.raises(ValueError, match="is not a plain name"):
        candidate_path(tmp_path / "root", slug)
    assert list(tmp_path.iterdir()) == []


# --- formats ------------------------------------------------------------------------------------


def test_nvfp4_tiny_block_gives_finite_output():
    rng = torch.Generator().manual_seed(0)
    for amax in (1e-37, 5e-39, 1.4e-45):  # below 2688 / fp32 max ~ 7.9e-36: gs would overflow
        x = torch.randn(4, 32, generator=rng) * amax
        q = nvfp4_quantize(x)
        assert torch.isfinite(q.global_scale).all() and torch.isfinite(q.scales.float()).all()
        d = nvfp4_dequantize(q)
        assert torch.isfinite(d).all()
        if amax > 1e-38:  # normal fp32 range: the blocks are represented to E2M1 precision
            assert torch.allclose(d, x, rtol=0.5, atol=amax * 0.05)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: nvfp4_quantize(torch.full((2, 16), 1e39, dtype=torch.float64)),
     "nvfp4_quantize: input of dtype torch.float64 and shape (2, 16) has 32 value(s) beyond the float32 range"),
    (lambda: unswizzle_128x4(torch.empty(0, 128, 4, dtype=torch.uint8), 1, 1),
     "unswizzle_128x4: a 3-D [E, ...] scale tensor needs at least one matrix, got shape (0, 128, 4)"),
    (lambda: NVFP4(*_q()[:2], torch.tensor(0.0)), "NVFP4: global_scale must be finite and > 0, got 0.0"),
    (lambda: NVFP4(*_q()[:2], torch.tensor(-2.0)), "NVFP4: global_scale must be finite and > 0, got -2.0"),
], ids=["fp64 above fp32 max", "unswizzle empty", "global_scale 0", "global_scale negative"])
def test_format_rows(call, message):
    with pytest.raises(ValueError) as ei:
        call()
    assert message in str(ei.value)


def _q() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = nvfp4_quantize(torch.randn(2, 32, generator=torch.Generator().manual_seed(1)))
    return q.data, q.scales, q.global_scale


# --- pytest bench -------------------------------------------------------------------------------


#: the runs of this table: the steady backend of tests/fakes/pytest_run.py on the simulated clock
#: (the ``sim_clock`` fixture), so a saved run and a later one time the same 1 ms; one window of
#: each case, also when saved (no row is about the further windows of a candidate)
STEADY = [*STEADY_RUN, "--fp4-min-samples", "8", "--fp4-windows", "1"]
_SAVED: dict[str, dict] = {}


def _saved(bench) -> dict:
    """A steady-spin candidate (saved once per session, copied after)."""
    if "base" not in _SAVED:
        res = bench.runpytest(*STEADY, "--fp4-save-baseline", "saved.json")
        assert res.ret == 0, res.stdout.str()
        _SAVED["base"] = json.loads((bench.path / "saved.json").read_text())
    return json.loads(json.dumps(_SAVED["base"]))


#: what a traceback looks like in pytest's output: Python's own, pytest's internal error, a
#: collection error, and a failure's long report (frame separators, ``E`` lines, source lines
#: with ``raise``, ``file.py:12: in f`` / ``file.py:12: ValueError`` frame footers)
TRACEBACK_MARKS = re.compile(r"Traceback|INTERNALERROR|ERROR collecting|_ _ _ _|^E   |^\s*raise |"
                             r"\.py:\d+: (in |\w*(Error|Exception|Exit)\b)", re.MULTILINE)


def _no_traceback(res) -> None:
    text = res.stdout.str() + res.stderr.str()
    found = TRACEBACK_MARKS.search(text)
    assert found is None, f"traceback marker {found.group(0)!r} in:\n{text}"


def _base_few_samples(d: dict) -> dict:
    for b in d["benchmarks"]:
        b["stats"]["data"] = b["stats"]["data"][:3]
    d["fp4bench"].pop("windows", None)  # one window of 3 samples
    return d


def _base_cold_l2(d: dict) -> dict:
    d["fp4bench"]["sweep"]["l2"] = "cold"
    return d


def _base_sweep(**fields: Any) -> Callable[[dict], dict]:
    """An edit that sets ``fields`` in the baseline's recorded ``sweep``."""
    def edit(d: dict) -> dict:
        d["fp4bench"]["sweep"].update(fields)
        return d

    return edit


# (id, args, baseline edit or None (no baseline file), exit, message in stderr (usage) / stdout)
PYTEST_ROWS: list[tuple[str, list[str], Callable | None, int, str]] = [
    ("bad routing", ["--fp4-routing", "zipf:abc"], None, 4,
     "fp4bench: --fp4-routing: routing 'zipf:abc': Zipf exponent 'abc' is not a number"),
    ("bad device", ["--fp4-device", "foo"], None, 4, "fp4bench: --fp4-device: 'foo' is not a torch device"),
    ("bad device + save", ["--fp4-device", "foo", "--fp4-save-baseline", "x.json"], None, 4,
     "fp4bench: --fp4-device: 'foo' is not a torch device"),
    ("bad plugin + baseline", ["--fp4-plugin", "no_such_module", "--fp4-baseline-file", "base.json"], lambda d: d, 4,
     "fp4bench: --fp4-plugin: cannot import backend module 'no_such_module'"),
    ("bad routing + baseline", ["--fp4-routing", "zipf:abc", "--fp4-baseline-file", "base.json"], lambda d: d, 4,
     "Zipf exponent 'abc' is not a number"),
    ("bad floor + baseline", ["--fp4-floor", "nan", "--fp4-baseline-file", "base.json"], lambda d: d, 4,
     "argument --fp4-floor: percentage must be in [0, 1000), got nan"),
    ("baseline 200k deep", ["--fp4-baseline-file", "base.json"], lambda d: "[" * 200_000 + "]" * 200_000, 4,
     "fp4bench baseline: baseline file base.json nests JSON too deeply to be a baseline"),
    ("baseline is a folder", ["--fp4-baseline-file", "."], None, 4, "fp4bench baseline: baseline file . is not a file"),
    ("baseline sample beyond the float range", ["--fp4-baseline-file", "base.json"],
     lambda d: _with_data(d, [10 ** 400] * 8), 4, "fp4bench baseline: base.json: benchmark 'test_fp4_gemm.py::"),
    ("save onto approved.json", ["--fp4-save-baseline", "baselines/cpu/approved.json"], None, 4,
     "a run is never saved as one; save a candidate and use 'fp4bench baseline approve'"),
    ("save onto an existing file", ["--fp4-save-baseline", "test_fp4_gemm.py.json"], None, 4,
     "test_fp4_gemm.py.json already exists; a run never overwrites a file"),
    ("save path without .json", ["--fp4-save-baseline", "results"], None, 4,
     "--fp4-save-baseline results: a result file name must end in .json"),
    ("energy window negative", ["--fp4-energy-window=-1"], None, 4,
     "argument --fp4-energy-window: must be a finite number of seconds >= 0, got -1"),
    ("energy window nan", ["--fp4-energy-window", "nan"], None, 4,
     "argument --fp4-energy-window: must be a finite number of seconds >= 0, got nan"),
    ("case timeout nan", ["--fp4-isolate", "--fp4-case-timeout", "nan"], None, 4,
     "argument --fp4-case-timeout: must be a finite number of seconds > 0, got nan"),
    ("seed 10**30", ["--fp4-seed", str(10 ** 30)], None, 4, "argument --fp4-seed: seed must be in 0..2**63-1, got 1"),
    ("min copies 0", ["--fp4-min-copies", "0"], None, 4, "argument --fp4-min-copies: must be in 1..16, got 0"),
    ("--fp4-python without --fp4-isolate", ["--fp4-python", "python3"], None, 4,
     "fp4bench: --fp4-python is the interpreter of --fp4-isolate's workers: it needs --fp4-isolate"),
    ("--fp4-a-env without --fp4-ab-against", ["--fp4-a-env", "X=1"], None, 4,
     "--fp4-a-env sets the environment of the --fp4-ab-against side: it needs --fp4-ab-against"),
    # a bad value in the baseline's recorded sweep names the file and the field, never an option
    # the user did not type, and the run that never started prints no verdict (of MISSING rows)
    # (the rows give --fp4-batches, --fp4-tp, --fp4-kinds and --fp4-backends: those fields are theirs)
    ("baseline's recorded models", ["--fp4-baseline-file", "base.json"], _base_sweep(models=["no-such-model"]), 4,
     "fp4bench: baseline base.json: recorded sweep field 'models': unknown model 'no-such-model'"),
    ("... a bad routing", ["--fp4-baseline-file", "base.json"], _base_sweep(routings=["zipf:0"]), 4,
     "fp4bench: baseline base.json: recorded sweep field 'routings': routing 'zipf:0': Zipf exponent must be"),
    ("... a bad tactics value", ["--fp4-baseline-file", "base.json"], _base_sweep(tactics="most"), 4,
     "fp4bench: baseline base.json: recorded sweep field 'tactics': expected 'default' or 'all', got 'most'"),
    ("... through --benchmark-compare", ["--benchmark-compare=base.json"], _base_sweep(models=["no-such-model"]), 4,
     "fp4bench: baseline base.json: recorded sweep field 'models': unknown model 'no-such-model'"),
    ("... a bad field the option given replaces", ["--fp4-baseline-file", "base.json"], _base_sweep(batches=[-1]), 0,
     "summary: 2 PASS → no regression (exit 0)"),
    ("baseline timed with cold L2", ["--fp4-baseline-file", "base.json"], _base_cold_l2, 4,
     "the baseline was timed with l2='cold', this run with l2='hot'"),
    ("baseline timed with another copy rule", ["--fp4-baseline-file", "base.json"], _base_sweep(min_copies=2), 4,
     "the baseline was timed with min_copies=2, this run with min_copies=1"),
    ("baseline with too few samples", ["--fp4-baseline-file", "base.json"], _base_few_samples, 1,
     "too few samples (baseline 3, current"),
    ("... accepted, but nothing judged", ["--fp4-baseline-file", "base.json", "--fp4-allow-ambiguous"], _base_few_samples,
     3, "→ INCOMPLETE: nothing judged"),
    ("AMBIGUOUS made to fail", ["--fp4-baseline-file", "base.json", "--fp4-fail-on-ambiguous", "--fp4-no-confirm"],
     "noisy-fast", 1,
     "AMBIGUOUS test_fp4_gemm.py::test_dense[steady-spin-default-glm-5-b1-tp32-uniform-shared_"),
    ("... passes by default", ["--fp4-baseline-file", "base.json", "--fp4-no-confirm"], "noisy-fast", 0, "AMBIGUOUS"),
]


def _noisy_fast(d: dict) -> dict:
    """Baseline windows at 0.2 µs, as the saved run, and at 50 s a call (the plausible range's
    ends): their spread is so wide that no number of new windows shows the change above or below
    the guard band, so every case is AMBIGUOUS."""
    for b in d["benchmarks"]:
        w = b["stats"]["data"]
        d["fp4bench"].setdefault("windows", {})[b["fullname"]] = [[2e-7] * len(w), list(w), [50.0] * len(w)]
    return d


@pytest.mark.parametrize(("args", "edit", "code", "message"), [r[1:] for r in PYTEST_ROWS],
                         ids=[r[0] for r in PYTEST_ROWS])
@pytest.mark.usefixtures("sim_clock")
def test_pytest_rows(bench, args, edit, code, message):
    (bench.path / "test_fp4_gemm.py.json").write_text("{}")
    if edit is not None:
        edit = _noisy_fast if edit == "noisy-fast" else edit
        data = edit(_saved(bench))
        (bench.path / "base.json").write_text(data if isinstance(data, str) else json.dumps(data))
    res = bench.runpytest(*STEADY, *args)
    _no_traceback(res)
    assert res.ret == code, res.stdout.str() + res.stderr.str()
    assert message in (res.stderr.str() if code == 4 else res.stdout.str())
    if code == 4:  # a run refused before it started judged nothing: no verdict table
        assert "fp4bench verdict" not in res.stdout.str() and "MISSING" not in res.stdout.str()
    assert (bench.path / "test_fp4_gemm.py.json").read_text() == "{}"
    assert not (bench.path / "baselines" / "cpu" / APPROVED).exists()


_BF16_SUBCLASS = "from fp4bench.backends.builtin.torch_bf16 import TorchBF16\n\nclass Odd(TorchBF16):\n"

# (id, source of the plugin module ``odd_plugin`` (None: none written), args, exit, message)
SETUP_ROWS: list[tuple[str, str | None, list[str], int, str]] = [
    ("CUDA device absent", None, ["--fp4-device", "cuda:99"], 4, "fp4bench: --fp4-device: 'cuda:99': "),
    ("bad FP4BENCH_SLOWDOWN", None, ["--fp4-plugin", "fp4bench.testing.slowdown"], 4,
     "fp4bench: --fp4-plugin fp4bench.testing.slowdown: FP4BENCH_SLOWDOWN: 'torch-bf16=x' is not BACKEND=FRACTION"),
    ("plugin raises RuntimeError", "raise RuntimeError('no licence')", [], 4,
     "fp4bench: --fp4-plugin: importing backend module 'odd_plugin' raised RuntimeError: no licence"),
    ("plugin raises ValueError", "raise ValueError('bad config')", [], 4,
     "fp4bench: --fp4-plugin: importing backend module 'odd_plugin' raised ValueError: bad config"),
    ("plugin has a SyntaxError", "def f(:\n", [], 4,
     "importing backend module 'odd_plugin' raised SyntaxError: invalid syntax (odd_plugin.py, line 1)"),
    ("plugin calls sys.exit", "import sys\nsys.exit(3)", [], 4,
     "importing backend module 'odd_plugin' raised SystemExit: 3"),
    ("BACKENDS is a number", "BACKENDS = 5", [], 4,
     "fp4bench: --fp4-plugin odd_plugin: odd_plugin.BACKENDS must be a list of backends, got int 5"),
    ("BACKENDS holds a string", "BACKENDS = ['torch-bf16']", [], 4,
     "odd_plugin.BACKENDS[0]: 'torch-bf16' is not a fp4bench Backend"),
    ("backend with kinds=None", _BF16_SUBCLASS + "    name = 'odd'\n    kinds = None\nBACKENDS = [Odd()]", [], 4,
     "odd_plugin.BACKENDS[0]: odd_plugin.Odd (backend 'odd'): kinds must be a non-empty set of dense, grouped, moe, "
     "quant, got None"),
    ("tactics() returns None", _BF16_SUBCLASS + "    name = 'odd'\n    def tactics(self, p, d):\n        return None\n"
     "BACKENDS = [Odd()]", ["--fp4-backends", "odd"], 4,
     "fp4bench: odd_plugin.Odd (backend 'odd'): tactics() returned None, not a list of Tactic"),
    ("empty backend name", _BF16_SUBCLASS + "    name = ''\nBACKENDS = [Odd()]", [], 4,
     "odd_plugin.BACKENDS[0]: odd_plugin.Odd: name must be a non-empty string without '|', got ''"),
    ("backend name with |", _BF16_SUBCLASS + "    name = 'a|b'\nBACKENDS = [Odd()]", [], 4,
     "odd_plugin.Odd: name must be a non-empty string without '|', got 'a|b'"),
    ("prepare() raises", None, ["--fp4-plugin", __name__, "--fp4-backends", "raising-prepare"], 1,
     "raising-prepare [default] on glm-5-b1-tp8-uniform-shared_gate_up-m1n512k6144: "
     "RuntimeError: out of workspace\n"),
    ("run() raises", None, ["--fp4-plugin", __name__, "--fp4-plugin", "fakes.pytest_run", "--fp4-backends",
                            "raising-run,steady-spin"], 1,
     "raising-run [default] on glm-5-b1-tp8-uniform-shared_down-m1n6144k256: ValueError: bad launch\n"),
]


@pytest.mark.parametrize(("source", "args", "code", "message"), [r[1:] for r in SETUP_ROWS],
                         ids=[r[0] for r in SETUP_ROWS])
@pytest.mark.usefixtures("sim_clock")
def test_setup_rows(bench, monkeypatch, source, args, code, message):
    """A usage error met while the session sets up is one line (exit 4), before any collection;
    a backend that raises fails its own cases in one line, and the sweep goes on."""
    monkeypatch.setenv("FP4BENCH_SLOWDOWN", "torch-bf16=x")
    if source is not None:
        bench.makepyfile(odd_plugin=source)
        bench.syspathinsert()
        args = ["--fp4-plugin", "odd_plugin", *args]
    res = bench.runpytest(*TINY, *args)
    _no_traceback(res)
    assert res.ret == code, res.stdout.str() + res.stderr.str()
    assert message in (res.stderr.str() if code == 4 else res.stdout.str())
    if code == 1:  # the raising backend's two cases failed; every other case still ran
        outcomes = res.parseoutcomes()
        assert outcomes["failed"] == 2 and outcomes.get("passed", 0) == (2 if "steady-spin" in args[-1] else 0)


@pytest.mark.usefixtures("sim_clock")
def test_save_baseline_does_not_swallow_the_test_path(bench):
    """``pytest --fp4-save-baseline bench``: ``bench`` is the tests, the candidate goes to the
    default place, and nothing is written over the folder or its files."""
    (bench.path / "bench").mkdir()
    (bench.path / "test_fp4_gemm.py").rename(bench.path / "bench" / "test_fp4_gemm.py")
    src = (bench.path / "bench" / "test_fp4_gemm.py").read_text()
    res = bench.runpytest(*STEADY, "--fp4-save-baseline", "bench")
    _no_traceback(res)
    assert res.ret == 0, res.stdout.str()
    assert res.parseoutcomes()["passed"] == 2
    (cand,) = (bench.path / "baselines" / "cpu" / "candidates").glob("*.json")
    assert json.loads(cand.read_text())["fp4bench"]["clean"] is True
    assert (bench.path / "bench" / "test_fp4_gemm.py").read_text() == src
    assert not list(bench.path.rglob("*.partial*"))


@pytest.mark.usefixtures("sim_clock")
def test_plugin_whose_availability_raises_costs_only_that_backend(bench):
    res = bench.runpytest(*STEADY, "--fp4-plugin", __name__, "--fp4-backends", "broken-availability,steady-spin")
    _no_traceback(res)
    assert res.ret == 0
    assert res.parseoutcomes()["passed"] == 2
    assert ("broken-availability on glm-5 b1 tp32 shared_gate_up M=1 N=128 K=6144: availability() raised "
            "RuntimeError: driver exploded") in res.stdout.str()


@pytest.mark.parametrize(("backend", "what"), [
    ("float64-output", "output has dtype torch.float64 (expected torch.bfloat16)"),
    ("flat-output", "output has shape (512,) (expected (1, 512))"),
])
def test_backend_output_of_the_wrong_dtype_or_shape_fails(bench, backend, what):
    res = bench.runpytest(*TINY, "--fp4-plugin", __name__, "--fp4-backends", backend)
    _no_traceback(res)
    assert res.ret == 1 and res.parseoutcomes()["failed"] == 2
    assert (f"{backend} [default] on glm-5-b1-tp8-uniform-shared_gate_up-m1n512k6144: "
            f"wrong output dtype/shape: {what}") in unwrapped(res.stdout.str())


@pytest.mark.usefixtures("sim_clock")
def test_slowdown_wrapper_is_recorded_and_never_approved(bench, capsys, monkeypatch):
    monkeypatch.setenv("FP4BENCH_SLOWDOWN", "steady-spin=0.05")
    res = bench.runpytest(*STEADY, "--fp4-plugin", "fp4bench.testing.slowdown", "--fp4-save-baseline", "inj.json")
    assert res.ret == 0, res.stdout.str()
    assert ("this run measured test-only backends (steady-spin): it is recorded in inj.json and can never be "
            "approved" in res.stdout.str())
    assert "approve it with" not in res.stdout.str()  # no hint that contradicts the line above
    sec = json.loads((bench.path / "inj.json").read_text())["fp4bench"]
    assert sec["sweep"]["test_only"] == {"steady-spin": "steady-spin (test-only: precomputed torch.mm result + 1 ms "
                                                        "clock.spin + test-only slowdown 0.05)"}
    assert sec["clean"] is False
    assert sec["sweep"]["l2"] == "hot" and sec["sweep"]["timer"] == "cpu"
    rc, _, err = _cli(capsys, ["baseline", "approve", str(bench.path / "inj.json"), "--baselines",
                               str(bench.path / "root"), "--force"])
    assert rc == 2 and "a test of the gate can never be approved" in err


def test_fault_backends_make_a_run_test_only(bench):
    # one window of the GLM-5 shared-expert GEMMs at TP 32 (a fault is a pure-torch row: a call
    # decodes every weight, a quarter of TP 8's)
    res = bench.runpytest(*TINY, "--fp4-tp", "32", "--fp4-plugin", "fp4bench.testing.faults", "--fp4-backends",
                          "fault-zero-band", "--fp4-save-baseline", "faults.json", "--fp4-windows", "1")
    assert res.ret == 0, res.stdout.str()
    sec = json.loads((bench.path / "faults.json").read_text())["fp4bench"]
    assert list(sec["sweep"]["test_only"]) == ["fault-zero-band"] and sec["clean"] is False


@pytest.mark.usefixtures("sim_clock")
def test_poisoned_context_is_saved_not_clean(bench, monkeypatch):
    """The CUDA context check runs before pytest-benchmark writes the JSON (it writes first in
    its sessionfinish), so a run that broke the context is never saved as clean."""
    def poisoned(st):
        st.health = "RuntimeError: CUDA error: an illegal memory access was encountered"

    monkeypatch.setattr(fp4bench.plugin.session.Fp4Session, "check_health", poisoned)
    res = bench.runpytest(*STEADY, "--fp4-save-baseline", "poisoned.json")
    assert res.ret == 1
    sec = json.loads((bench.path / "poisoned.json").read_text())["fp4bench"]
    assert sec["clean"] is False and "illegal memory access" in sec["context_health"]
    assert "CUDA CONTEXT BROKEN after the run: RuntimeError" in res.stdout.str()


@pytest.mark.filterwarnings("ignore:Not saving anything")
def test_nothing_measured_leaves_no_reserved_file(bench):
    """A session that measures nothing leaves no empty reserved candidate behind."""
    res = bench.runpytest(*STEADY, "-k", "no_such_test", "--fp4-save-baseline", "empty.json")
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert not (bench.path / "empty.json").exists() and not list(bench.path.rglob("*.partial*"))
