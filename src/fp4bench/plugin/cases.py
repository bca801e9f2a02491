"""One fp4bench case in its pytest test: measured, skipped or failed as pytest sees it, recorded in
pytest-benchmark and the run's state, and gated against the baseline as it finishes.

``run_case`` is what the ``fp4_bench`` fixture runs; ``gate`` judges the case on its windows and,
while the decision rule is undecided, takes further windows within the run's budgets. ``st`` is
the run's ``plugin.session.Fp4Session``.
"""

from __future__ import annotations

from fp4bench import clock
from typing import Any

import pytest
import torch

from fp4bench.backends._errors import one_line
from fp4bench.backends.jit_cache import unbuilt_reason
from fp4bench.backends.registry import get_backend
from fp4bench.gate.baseline import availability_key, availability_value, is_ok
from fp4bench.gate.record import check_samples
from fp4bench.gate.policy import is_failure
from fp4bench.gate.judge import judge
from fp4bench.gate.picks import mispick
from fp4bench.plugin import benchmark as pb
from fp4bench.plugin.console import fail, skip
from fp4bench.report.tables import check_row, result_row, verdict_headline, verdict_message
from fp4bench.run.case import FAILED, MEASURED, OUT_OF_MEMORY, SKIPPED, UNSUPPORTED, CaseResult
from fp4bench.run.windows import settle, take_window


def run_case(st: Any, request: pytest.FixtureRequest, benchmark: Any, spec: Any) -> CaseResult:
    """Measure ``spec``; skip / fail it as pytest sees it; record and gate its samples."""
    fullname = pb.name_of(benchmark, request.node)
    pb.claim(benchmark)
    judging = st.baselines.judging(fullname, st.fingerprint, st.policy) if st.baselines else None
    base = judging.record if judging is not None else None
    backend = get_backend(spec.backend)
    key = availability_key(spec.backend, spec.problem.id, spec.tactic.label)
    jit = jit_reason(st.device, spec.backend)
    if spec.skip_reason or jit:
        res_status, reason = SKIPPED, spec.skip_reason or jit
        res = None
    else:
        try:  # the backend's own prepare()/run() raising fails this case in one line; the sweep goes on
            res = st.runner.run(backend, spec.problem, spec.tactic, measure=pb.times_cases(st.config, benchmark))
        except Exception as exc:
            fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {one_line(exc)}",
                 f"{type(exc).__name__} in {spec.backend}")
        res_status, reason = res.status, res.reason

    if res_status == SKIPPED:
        if base is not None:
            fail(request.node, f"MISSING NOW: measured in the baseline ({st.baseline_path}), skipped now: {reason}",
                 "MISSING NOW")
        st.skipped[fullname] = reason
        st.skipped_backend[fullname] = spec.backend
        skip(spec, reason, request.node)
    if res_status == UNSUPPORTED:
        st.availability[key] = availability_value(False, reason)
        was = judging.file.baseline.availability.get(key) if judging is not None else None
        if was is not None and is_ok(was):
            fail(request.node, f"LOST TACTIC {spec.tactic.label}: initialized in the baseline, now unsupported: "
                 f"{reason}", f"LOST TACTIC {spec.tactic.label}")
        st.skipped[fullname] = f"unsupported: {reason}"
        st.skipped_backend[fullname] = spec.backend
        skip(spec, f"unsupported: {reason}", request.node)
    if res_status == OUT_OF_MEMORY:  # a resource failure of this case: no output or time to judge
        fail(request.node, f"OUT OF MEMORY: {spec.backend} [{spec.tactic.label}] on {spec.problem.id} did not fit in "
             f"device memory (not a wrong output and no timing verdict): {reason}", "OUT OF MEMORY")
    st.availability[key] = availability_value(True)
    if spec.note:
        res.extra_info["problem_note"] = spec.note
    res.extra_info["tactic_sweep"] = spec.tactic_sweep  # what --fp4-tactics default narrows by
    res.extra_info["gpu_uuid"] = st.fingerprint.gpu_uuid  # the unit that measured it (None: a CPU)
    benchmark.extra_info.update(res.extra_info)
    benchmark.group = f"{spec.problem.kind} {spec.problem.origin.model} {spec.problem.origin.role}"
    st.checks[fullname] = check_row(spec, res)
    if res_status == FAILED:
        fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {reason}",
             reason.split(": ", 1)[0])
    assert res_status == MEASURED
    if res.timing is None:  # --benchmark-disable: correctness only
        return res
    try:  # a zero / non-finite time is a broken timer, never a fast kernel
        check_samples(list(res.timing.samples_s), "the timer")
    except ValueError as exc:
        fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {exc}", "broken timer")
    pb.record_in_benchmark(benchmark, res.timing)
    st.rows.append(result_row(spec, res))
    st.row_of[fullname] = st.rows[-1]
    st.measured[fullname] = (list(res.timing.samples_s), dict(res.extra_info))
    st.windows[fullname] = [list(res.timing.samples_s)]
    st.cases[fullname] = (backend, spec)
    why = mispick(fullname, res.extra_info, res.timing.median_s, st.measured, st.policy.floor)
    if why is not None:  # the explicit rows it is held to ran before it (``sweep.cases_for``)
        fail(request.node, f"{spec.backend} on {spec.problem.id}: {why}", "AUTOTUNER MIS-PICK")
    if judging is not None:
        gate(st, request.node, benchmark, spec, backend, base, fullname, res, judging.policy)
    return res


def jit_reason(device: Any, backend: str) -> str:
    """Skip (naming ``fp4bench prepare``) rather than JIT-compile FlashInfer for minutes in a test."""
    if device is None or device.type != "cuda":
        return ""
    return unbuilt_reason(backend, tuple(torch.cuda.get_device_capability(device)))


def gate(st: Any, node: Any, benchmark: Any, spec: Any, backend: Any, base: Any, fullname: str, res: CaseResult,
         policy: Any) -> None:
    """Judge the case now on its windows; while the rule wants more (``Verdict.wants_more``)
    and the per-case and session budgets allow, take another independent window: fresh
    memory, operands, prepared layouts and graph capture (``windows.take_window``), as asv and
    Pinpoint re-run only the flagged benchmarks."""
    opt = st.config.getoption
    max_windows = 1 if opt("fp4_no_confirm") else opt("fp4_max_windows")
    ws = st.windows[fullname]

    def take(index: int):
        t0 = clock.now()
        try:
            return take_window(st.runner, backend, spec, index)
        finally:
            st.window_seconds += clock.now() - t0

    v = settle(lambda windows, budget_left: judge(fullname, base, windows, res.extra_info, policy,
                                                  budget_left=budget_left),
               take, ws, max_windows, lambda: st.window_seconds < opt("fp4_window_budget"),
               lambda why: st.window_errors.append((fullname, why)))
    st.judged[fullname] = len(ws)
    benchmark.extra_info["verdict"] = str(v.status)
    if is_failure(v, policy):
        hint = " (--fp4-allow-ambiguous to accept)" if v.undecided else ""
        fail(node, verdict_message(v) + hint, verdict_headline(v))
