"""One benchmark case as a plain object: backend × problem × tactic -> checked, timed record.

Cross-backend agreement needs no separate check: every backend is held to the same
elementwise bound around the reference decoded from the *same bytes*, so two passing
backends agree within twice that bound by the triangle inequality (a second comparison
could never fail on its own).

Order matters and is fixed here, not in pytest: availability gate -> shape gate -> operands
(quantized once, cached) -> prepare (scale padding poisoned) -> correctness (a failed check skips
timing; one that passes with zero scale padding is ``reads scale padding``) -> rotating copies,
each checked once (``copy mismatch``) -> GPU timing with NVML sampling -> kernel names ->
replays with changing inputs, each checked (``replay mismatch``, ``measure.replays``) ->
extra_info. The pytest plugin only turns a ``CaseResult`` into skip / fail / benchmark stats.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from fp4bench import clock
from fp4bench.backends._errors import one_line
from fp4bench.backends.base import Backend, Prepared, Tactic, TacticUnsupported, availability_of
from fp4bench.gate.picks import choice_text
from fp4bench.measure import copies as copy_rule
from fp4bench.measure import holdings
from fp4bench.measure import kernels as kernel_ids
from fp4bench.measure import peaks as peak_table
from fp4bench.measure import replays as later
from fp4bench.measure.health import out_of_memory
from fp4bench.measure.telemetry import for_device as telemetry_for
from fp4bench.measure.timing import TimingConfig, TimingResult, time_cpu, time_gpu
from fp4bench.measure.verify import WRONG_LAYOUT, CheckResult, check_case
from fp4bench.measure.verify_quant import check_quant, padding_written
from fp4bench.run.caches import CaseCaches
from fp4bench.run.checks import SecondSet, replay_case, second_set
from fp4bench.run.operand_copies import copied_fields, operand_copy
from fp4bench.workload.operands import Operands, other_activations
from fp4bench.workload.problems import Problem, QuantProblem

SKIPPED = "skipped"
UNSUPPORTED = "unsupported"
FAILED = "failed"
MEASURED = "measured"
#: the case did not fit in device memory: a resource failure of the case, not a verdict on its
#: output or its time (``measure.health.out_of_memory``)
OUT_OF_MEMORY = "out of memory"


class CheckFailed(RuntimeError):
    """A timed call's operands failed their check (a rotating copy: ``copy mismatch``)."""


@dataclass
class CaseResult:
    status: str  # skipped | unsupported | failed | measured | out of memory
    reason: str = ""
    check: CheckResult | None = None
    timing: TimingResult | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)


def measurement_of(device_type: str, cold_l2: bool, timer: str, min_copies: int | None = None
                   ) -> dict[str, Any]:
    """The effective L2 state (a CPU run is always cache-hot), timer and rotating-copy rule of a
    runner's settings: what a saved run records and a baseline's must match. ``min_copies`` and
    ``copy_memory`` (``measure.copies``) say how many placements a case averages at least and
    the share of device memory its copies may take; with a hot L2 every case has one copy."""
    cold = cold_l2 and device_type == "cuda"
    min_copies = min_copies or copy_rule.MIN_COPIES
    out: dict[str, Any] = {"l2": "cold" if cold else "hot", "timer": timer, "min_copies": min_copies if cold else 1}
    if cold:
        out["copy_memory"] = copy_rule.MEMORY_FRACTION
    return out


def placement_pad_bytes(seed: int, index: int) -> int:
    """The pad of placement set ``index`` (``CaseRunner.new_placement``): 4-260 MiB in 2 MiB steps
    (the caching allocator's large-block granularity), drawn from the seed and the index, so a
    run's windows get different placements and a rerun the same sequence."""
    import random

    return (1 + random.Random(seed * 1_000_003 + index).randrange(1, 130)) * (2 << 20)


class CaseRunner(CaseCaches):
    """Holds the per-session caches (operands, references: ``run.caches``) and the measurement
    settings.

    ``min_copies``: rotating copies a cold-L2 case on a GPU has at least (None: ``MIN_COPIES``);
    given, a CPU run makes that many copies too, each checked once (``copy mismatch``): the
    check runs where no GPU is. ``replays``: replays with changing inputs checked after timing
    (``measure.replays``; 0: none)."""

    def __init__(self, device: torch.device, timing: TimingConfig, *, cold_l2: bool = True,
                 seed: int = 0, min_copies: int | None = None,
                 max_rotating_copies: int = copy_rule.MAX_COPIES,
                 peaks: peak_table.GpuPeaks | None = None, cache_size: int = 2,
                 replays: int = later.DEFAULT_REPLAYS):
        super().__init__(device, seed, cache_size)
        self.timing, self.cold_l2 = timing, cold_l2
        if min_copies is not None and not 1 <= min_copies <= max_rotating_copies:
            raise ValueError(f"min_copies must be in 1..{max_rotating_copies}, got {min_copies}")
        if replays < 0:
            raise ValueError(f"replays must be >= 0, got {replays}")
        self.min_copies, self.max_rotating_copies = min_copies or copy_rule.MIN_COPIES, max_rotating_copies
        self.cpu_copies = min_copies or 1
        self.replays = replays
        self.peaks = peaks

    def measurement(self) -> dict[str, Any]:
        """How this runner takes its times (recorded in a saved run's ``sweep``)."""
        return measurement_of(self.device.type, self.cold_l2, self.timing.mode, self.min_copies)

    def new_placement(self, index: int) -> int:
        """Move what is allocated next to a fresh placement set: hold a pad of device memory, its
        size drawn from ``index`` and the seed (``placement_pad_bytes``), until the next
        ``release``. Operands re-made after a release land on nearly the same placement every
        time; made beside a live allocation they land elsewhere (docs/results-h200.md, run 23:
        "clonepad"), so each window of a run (``run.windows``) samples a placement of its own.
        Returns the pad's bytes (0 off CUDA, where placement does not apply)."""
        if self.device.type != "cuda":
            return 0
        nbytes = placement_pad_bytes(self.seed, index)
        self._pad = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return nbytes

    # -- one case -----------------------------------------------------------------------
    def run(self, backend: Backend, problem: Problem, tactic: Tactic, *, measure: bool = True) -> CaseResult:
        """Gate, check and (unless ``measure`` is False: correctness only) time one case; then
        check its replays. A case that runs out of device memory beside what this runner caches
        (the operand sets and prepared state of earlier cases, up to ``cache_size`` problems) is
        run once more after every cache is released: on an 80 GB card a b64 MoE case needs 24 GiB
        beside the 64 GiB an autotuned row's problem left cached (H100 run, docs/results-h200.md).
        Out of memory again, it is ``OUT_OF_MEMORY``, its caches released for the next case."""
        for attempt in (1, 2):
            try:
                return self._run(backend, problem, tactic, measure=measure)
            except Exception as exc:
                if not out_of_memory(exc):
                    raise
                cached = any(key[0] != problem.id for key in [*self._ops, *self._refs])  # another problem's
                self.release()  # what the case and the earlier ones hold goes back
                if attempt == 2 or not cached:
                    again = " (also with every cached operand set released)" if attempt == 2 else ""
                    return CaseResult(OUT_OF_MEMORY, one_line(exc) + again)
        raise AssertionError("unreachable")

    def _run(self, backend: Backend, problem: Problem, tactic: Tactic, *, measure: bool) -> CaseResult:
        avail = availability_of(backend, self.device)
        if not avail.ok:
            return CaseResult(SKIPPED, f"{backend.name}: {avail.reason}")
        why = backend.unsupported_reason(problem)
        if why:
            return CaseResult(SKIPPED, f"{backend.name}: {why}")
        ops = self.operands(problem, backend.act_format, backend.weight_format)
        prep = self.prepared(backend, problem, ops)
        info = self._describe(backend, avail.version, problem, tactic)
        t0 = clock.now()
        try:
            check = self._check(backend, ops, prep, tactic)
        except TacticUnsupported as exc:
            info["availability"] = f"unsupported: {exc}"
            return CaseResult(UNSUPPORTED, str(exc), extra_info=info)
        info["availability"] = "ok"
        info.update(check.to_extra_info())
        choice = backend.library_choice(prep)  # what the checked call ran
        if choice is not None:
            info["choice"] = choice
        info["scale_padding_poisoned"] = self._padding
        if not check.ok:
            return self._failed(backend, prep, check, info)
        quantizer = self._quantizer_call(backend, prep, tactic)
        if quantizer is not None:  # what the GEMM fed by this quantizer may find in the padding
            c = ops.qa.scales.shape[-1]
            info["quant_scale_padding"] = padding_written(quantizer, ops.qa.scales.shape[-2], c,
                                                          getattr(backend, "scale_layout", "128x4"), self.device)
        timing = None
        fns, bad_copy = self._rotating_calls(backend, problem, ops, prep, tactic)  # checked also untimed
        if bad_copy is not None:
            info.update(bad_copy.to_extra_info())
            return self._failed(backend, prep, bad_copy, info)
        info["copies_checked"] = len(fns)
        if measure:
            timing = self._time(backend, fns, info)
        del fns  # the copies go before the replays' second operand set is made
        # a call's time: the timer's estimate, else (untimed) half the first check (two calls)
        est = (clock.now() - t0) / 2 if timing is None else timing.extra.get("estimate_s", timing.median_s)
        replayed = self._replay(backend, ops, prep, tactic, est)
        if replayed is not None:
            info.update(replayed.to_extra_info())
            if not replayed.result.ok:
                return self._failed(backend, prep, replayed.result, info)
        if timing is None:
            return CaseResult(MEASURED, "correctness only (timing disabled)", check=check, extra_info=info)
        info.update(timing.to_extra_info())
        info.update(self._rates(problem, backend, timing.median_s))
        return CaseResult(MEASURED, check=check, timing=timing, extra_info=info)

    @staticmethod
    def _failed(backend: Backend, prep: Prepared, check: CheckResult, info: dict) -> CaseResult:
        choice = info.get("choice")
        chose = f" (the library chose {choice_text(choice)})" if choice is not None else ""
        return CaseResult(FAILED, f"{check.kind}: {check.detail}{chose}{backend.failure_hint(prep)}", check=check,
                          extra_info=info)

    def _time(self, backend: Backend, fns: list, info: dict) -> TimingResult:
        """Time the rotating calls (telemetry on a GPU) and record the kernels that ran."""
        if self.device.type == "cuda":
            with telemetry_for(self.device) as tele:
                timing = time_gpu(fns, self.timing, self.device, backend.no_graph_reason)
            if tele.result is not None:
                # energy per call is only reported for windows >= 1 s (see TelemetrySampler)
                info.update(tele.result.to_extra_info(len(timing.samples_s) * timing.calls_per_sample))
        else:
            timing = time_cpu(fns, dataclasses.replace(self.timing, mode="cpu"))
        if "kernels" not in timing.extra:  # the CUPTI timer already saw them; else one profiled call
            names = kernel_ids.kernel_names(fns[0])
            if names or self.device.type == "cuda":  # a CPU run sees no device kernels
                info["kernels"] = names
        return timing

    def _check(self, backend: Backend, ops: Operands, prep: Prepared, tactic: Tactic) -> CheckResult:
        """``_check_prepared``; a GEMM case that fails with its scale padding poisoned is prepared
        again with zero padding and checked again: passing then, it ``reads scale padding``;
        failing then too, it is named by that check (the failure does not come from the padding)."""
        check = self._check_prepared(backend, ops, prep, tactic)
        if check.ok or check.kind == WRONG_LAYOUT or not self._padding or isinstance(ops.problem, QuantProblem):
            return check
        zeroed = backend.prepare(ops.problem, ops, self.device)  # outside scale_padding: zeros
        plain = self._check_prepared(backend, ops, zeroed, tactic)
        if plain.ok:
            return later.reads_padding(self._padding, check)
        if plain.kind != check.kind:  # wrong whatever the padding holds: named as with zero padding
            plain.detail += f" (with 0xFF in the scale padding: {check.kind})"
        return plain

    @staticmethod
    def _quantizer_call(backend: Backend, prep: Prepared, tactic: Tactic) -> Any:
        """One call of the library quantizer of a quantizer or end-to-end row; None for others."""
        if isinstance(prep.problem, QuantProblem):
            return lambda: backend.run(prep, tactic)
        own = getattr(backend, "quantized_activations", None)
        return None if own is None else (lambda: own(prep))

    def _check_prepared(self, backend: Backend, ops: Operands, prep: Prepared, tactic: Tactic) -> CheckResult:
        """A quantizer's bytes bit-exact against ours; a GEMM's output against the reference (after
        the bytes of an end-to-end row's own quantizer)."""
        layout = getattr(backend, "scale_layout", "128x4")
        if isinstance(ops.problem, QuantProblem):
            return check_quant(lambda: backend.run(prep, tactic), ops.qa, layout)
        own = getattr(backend, "quantized_activations", None)  # an end-to-end row quantizes itself
        if own is not None:
            quantized = check_quant(lambda: own(prep), ops.qa, layout)
            if not quantized.ok:
                return quantized
        ref = self.reference(ops, backend.reference_options(prep), backend.output_roundings)
        return check_case(lambda: backend.run(prep, tactic), prep.out, ref.out, ref.bound, ref.bulk, ref.unquantized)

    def _second_set(self, backend: Backend, ops: Operands, prep: Prepared) -> SecondSet:
        """The replays' second operand set for the cached ``prep`` (made once per backend and
        problem, like ``prep``, and dropped with it)."""
        if self._second is None:
            problem = ops.problem

            def reference(other: Operands, p: Prepared):
                if isinstance(problem, QuantProblem):
                    return None
                return self.reference(other, backend.reference_options(p), backend.output_roundings)

            self._second = second_set(prep, ops, other_activations(ops),
                                      lambda o: self._prepare(backend, problem, o)[0], reference)
        return self._second

    def _replay(self, backend: Backend, ops: Operands, prep: Prepared, tactic: Tactic,
                est: float) -> later.ReplayReport | None:
        """``self.replays`` replays of the case (fewer for a call that takes ``est`` seconds too
        long: ``replays_for``), the inputs alternating between the case's operands and a second
        set, each output checked."""
        n = later.replays_for(self.replays, est, self.timing.time_budget_s,
                              prep.out.numel() * prep.out.element_size())
        if n == 0:
            return None
        own_ref = None if isinstance(ops.problem, QuantProblem) else self.reference(
            ops, backend.reference_options(prep), backend.output_roundings)
        return replay_case(backend, prep, tactic, ops, own_ref, self._second_set(backend, ops, prep), n, self.device)

    def timed_calls(self, backend: Backend, problem: Problem, tactic: Tactic) -> list:
        """The callables ``run`` times (rotating copies for a cold L2), for a caller that times
        them in several short rounds (``fp4bench ab``) instead of one ``run``; a copy that fails
        its check raises ``CheckFailed``."""
        ops = self.operands(problem, backend.act_format, backend.weight_format)
        fns, bad = self._rotating_calls(backend, problem, ops, self.prepared(backend, problem, ops), tactic)
        if bad is not None:
            raise CheckFailed(f"{bad.kind}: {bad.detail}")
        return fns

    def copies_for(self, backend: Backend, problem: Problem, ops: Operands, prep: Prepared) -> int:
        """Rotating copies of this case (``measure.copies``): with a hot L2 one; off CUDA the
        ``min_copies`` given (default one); else from the GPU's L2 and *total* memory and what the
        case holds beside its copies (``holdings.case_bytes`` of ``ops`` and its first ``prep``),
        so every process on the GPU gets the same count."""
        if self.device.type != "cuda":
            return self.cpu_copies
        if not self.cold_l2:
            return 1
        props = torch.cuda.get_device_properties(self.device)
        held = holdings.case_bytes(ops, prep, [getattr(ops, n) for n in copied_fields(ops)])
        return copy_rule.copy_count(l2_bytes=props.L2_cache_size,
                                    footprint_bytes=problem.bytes_moved(backend.act_format, backend.weight_format),
                                    copy_bytes=held.per_copy, held_bytes=held.held, transient_bytes=held.transient,
                                    total_bytes=props.total_memory,
                                    min_copies=self.min_copies, max_copies=self.max_rotating_copies)

    def _rotating_calls(self, backend: Backend, problem: Problem, ops: Operands, prep: Prepared,
                        tactic: Tactic) -> tuple[list, CheckResult | None]:
        """One callable per copy: the prepared checked operands, then each further copy cloned
        into allocations of its own (``operand_copy``, made while the others are alive, so at
        another place in device memory), prepared and checked once; the first copy that fails
        its check ends the list (``copy mismatch``). Made afresh for every measurement, never
        cached."""
        copies = self.copies_for(backend, problem, ops, prep)
        preps = [prep]
        for i in range(1, copies):
            p = self._prepare(backend, problem, operand_copy(ops))[0]
            got = self._check_prepared(backend, ops, p, tactic)
            if not got.ok:
                return [], later.copy_mismatch(i, copies, got)
            preps.append(p)
        return [(lambda p=p: backend.run(p, tactic)) for p in preps], None

    def _describe(self, backend: Backend, version: str | None, problem: Problem, tactic: Tactic) -> dict:
        o = problem.origin
        info: dict[str, Any] = {
            "backend": backend.name, "backend_version": version, "api": backend.api,
            "tactic": tactic.label, "explicit_tactic": not tactic.default, "problem": problem.id, "kind": problem.kind,
            "model": o.model, "batch": o.batch, "tp": o.tp, "routing": o.routing, "role": o.role,
            "act_format": backend.act_format, "weight_format": backend.weight_format,
            # rotating copies are only made on CUDA (``_rotating_calls``): a CPU run is cache-hot
            "l2": "cold (rotating copies)" if self.cold_l2 and self.device.type == "cuda" else "hot",
        }
        if tactic.config is not None:
            info["tactic_config"] = tactic.config
        info.update(problem.shape_info())
        return info

    def _rates(self, problem: Problem, backend: Backend, seconds: float) -> dict:
        flops = problem.flops
        nbytes = problem.bytes_moved(backend.act_format, backend.weight_format)
        out = {"flops": flops, "bytes": nbytes, "tflops": flops / seconds / 1e12, "tbps": nbytes / seconds / 1e12}
        if self.peaks is not None:
            _, _, pc, pb = peak_table.percent_of_peak(flops, nbytes, seconds, self.peaks, backend.weight_format)
            out.update(pct_peak_compute=pc, pct_peak_bandwidth=pb)
        return out
