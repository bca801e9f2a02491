"""Two workers, one per environment, on the same GPU: list, check, then time in rounds.

Per benchmark: both sides first check correctness (prepare + verify: FlashInfer JIT modules are
built and loaded here, timed and shown, never inside a measurement) and report a digest of the
operand bytes, which must match (the same seeded bytes are the reference for both). Then
``schedule.abba`` rounds of a fixed sample count, alternating the sides. A worker that dies,
hangs or poisons its context costs that benchmark on that side (a named failure) and is
restarted for the next one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Collection

from fp4bench.ab.schedule import SIDES, abba
from fp4bench.sweep import SweepOptions
from fp4bench.worker.pool import Worker, WorkerLost, WorkerSpec, interpreter


@dataclass(frozen=True)
class Side:
    """One environment: its interpreter (or venv), extra environment variables, and backend
    modules only this side loads (e.g. ``fp4bench.testing.slowdown`` on B, to test the gate)."""

    python: str
    env: dict[str, str] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class AbConfig:
    sweep: SweepOptions
    device: str | None = None
    pairs: int = 8  # rounds per side
    round_samples: int = 10
    timeout_s: float = 900.0
    plugins: tuple[str, ...] = ()
    cold_l2: bool = True
    seed: int = 0
    #: "span": a sample is the CUDA-graph replay's event span per call (what a graph-serving
    #: engine pays, launch gaps included), the kernel names come from one extra profiled round;
    #: "cupti": every round is profiled and a sample is kernel busy time, as in the pytest run.
    #: Both sides always use the same timer; "span" keeps the profiler out of the rounds.
    timer: str = "span"


@dataclass
class SideResult:
    """What one side produced for one benchmark."""

    status: str = "pending"  # measured | failed | skipped | unsupported
    reason: str = ""
    samples: list[float] = field(default_factory=list)
    extra_info: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    check_s: float = 0.0  # prepare + verify wall time (JIT build/load included)
    #: NVML per timing round (SM clock, power, temperature, throttling); empty on CPU
    telemetry: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Paired:
    name: str
    a: SideResult
    b: SideResult
    order: list[str] = field(default_factory=list)  # the sides in the order their rounds ran


@dataclass
class AbRun:
    fingerprints: dict[str, dict]
    versions: dict[str, dict[str, str | None]]
    pairs: list[Paired]
    check_seconds: dict[str, float]
    #: per side, the test-only backends its worker registered (``{name: description}``)
    test_only: dict[str, dict[str, str]] = field(default_factory=dict)
    #: benchmarks listed but never judged because the run was interrupted (Ctrl-C / SIGINT)
    not_reached: list[str] = field(default_factory=list)


def _init(side: Side, cfg: AbConfig) -> dict[str, Any]:
    """The worker's init message: the default timing method (the round sample count is set per
    request), the backend modules of both sides and of this side."""
    from fp4bench.measure.timing import TimingConfig

    return {"device": cfg.device, "plugins": list(cfg.plugins) + list(side.plugins),
            "timing": asdict(TimingConfig()), "cold_l2": cfg.cold_l2, "seed": cfg.seed}


class AbRunner:
    def __init__(self, a: Side, b: Side, cfg: AbConfig, progress: Callable[[str], None] | None = None):
        self.cfg = cfg
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.test_only: dict[str, dict[str, str]] = {}  # per side, filled when the workers start
        self.workers = {
            label: Worker(WorkerSpec(python=interpreter(s.python), env=dict(s.env), init=_init(s, cfg),
                                     timeout_s=cfg.timeout_s, start_timeout_s=max(cfg.timeout_s, 300.0)),
                          label=f"side {label}")
            for label, s in zip(SIDES, (a, b))
        }

    def _ask(self, side: str, msg: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            return self.workers[side].request(msg, what)
        except WorkerLost as exc:
            return {"status": "failed", "reason": str(exc), "lost": True}

    def start(self) -> dict[str, dict]:
        fps = {}
        for side, w in self.workers.items():
            ready = w.start()
            fps[side] = ready["fingerprint"]
            self.test_only[side] = dict(ready.get("test_only") or {})
            self.progress(f"[{side}] worker {ready['pid']}: {ready.get('python')} "
                          f"(torch {fps[side].get('torch')}, flashinfer {fps[side].get('flashinfer') or '-'})")
        return fps

    def run(self, sweep_for: Callable[[dict], SweepOptions] | None = None, only: Collection[str] | None = None,
            on_pair: Callable[[int, int, Paired], None] | None = None) -> AbRun:
        """``only``: the benchmark ids to run (a pytest run's selection, -k included), None: all
        listed. ``on_pair(i, n, pair)`` is called after each benchmark (progress)."""
        fps = self.start()
        sweep = sweep_for(fps["A"]) if sweep_for else self.cfg.sweep
        listed = {s: self._ask(s, {"op": "cases", "sweep": sweep.to_dict()}, "listing the sweep") for s in SIDES}
        for s, reply in listed.items():
            if reply.get("status") != "listed":
                raise RuntimeError(f"side {s} could not list the sweep: {reply.get('reason')}")
        by_side = {s: {c["id"]: c for c in listed[s]["cases"]} for s in SIDES}
        names = list(by_side["A"]) + [n for n in by_side["B"] if n not in by_side["A"]]
        if only is not None:
            names = [n for n in names if n in only]
        check_s = {s: 0.0 for s in SIDES}
        pairs: list[Paired] = []
        interrupted = False
        try:
            for i, name in enumerate(names, 1):
                p = self._one(name, by_side, f"{i}/{len(names)}")
                check_s["A"] += p.a.check_s
                check_s["B"] += p.b.check_s
                pairs.append(p)
                if on_pair is not None:
                    on_pair(i, len(names), p)
        except KeyboardInterrupt:  # a time limit (timeout -s INT) or Ctrl-C: judge what finished
            interrupted = True
            self.progress(f"interrupted: {len(names) - len(pairs)} of {len(names)} benchmarks not reached")
        finally:
            for w in self.workers.values():
                w.kill() if interrupted else w.close()  # an interrupted worker may be mid-case
        return AbRun(fps, {s: listed[s]["versions"] for s in SIDES}, pairs, check_s, self.test_only,
                     not_reached=names[len(pairs):])

    def _one(self, name: str, by_side: dict, where: str) -> Paired:
        res = {s: SideResult() for s in SIDES}
        entries = {s: by_side[s].get(name) for s in SIDES}
        for s in SIDES:
            e, r = entries[s], res[s]
            if e is None:
                r.status, r.reason = "unsupported", f"not in side {s}'s sweep (its library lists no such tactic)"
                continue
            if e["skip_reason"]:
                r.status, r.reason = "skipped", e["skip_reason"]
                continue
            t0 = time.perf_counter()
            reply = self._ask(s, {"op": "check", "case": e["case"]}, f"check {name}")
            r.check_s = time.perf_counter() - t0
            r.status, r.reason = reply.get("status", "failed"), reply.get("reason", "")
            r.extra_info = dict(reply.get("extra_info") or {})
            r.digest = reply.get("operand_digest")
            why = f" ({r.reason.splitlines()[0][:200]})" if r.status != "measured" and r.reason else ""
            self.progress(f"[{s}] {where} prepared + checked {name}: {r.status} in {r.check_s:.1f} s{why}")
        order: list[str] = []
        if all(res[s].status == "measured" for s in SIDES):
            cupti = self.cfg.timer == "cupti"
            if not cupti:  # the kernel names, from one profiled round per side that is not a sample
                for s in SIDES:
                    reply = self._ask(s, {"op": "time", "case": entries[s]["case"], "samples": 3,
                                          "kernel_time": True}, f"kernel names {name}")
                    if reply.get("status") != "measured":
                        res[s].status, res[s].reason = "failed", f"while profiling: {reply.get('reason')}"
                    else:
                        res[s].extra_info["kernels"] = (reply["timing"].get("extra") or {}).get("kernels", [])
            for s in abba(self.cfg.pairs) if all(res[x].status == "measured" for x in SIDES) else ():
                reply = self._ask(s, {"op": "time", "case": entries[s]["case"], "samples": self.cfg.round_samples,
                                      "kernel_time": cupti}, f"timing {name}")
                if reply.get("status") != "measured":
                    res[s].status, res[s].reason = "failed", f"during timing: {reply.get('reason')}"
                    break
                t = reply["timing"]
                res[s].samples += t["samples_s"]
                if cupti and "kernels" in (t.get("extra") or {}):  # CUPTI names of the timed kernels
                    res[s].extra_info["kernels"] = t["extra"]["kernels"]
                res[s].extra_info.update(timer=t["method"], calls_per_sample=t["calls_per_sample"])
                if reply.get("telemetry"):
                    res[s].telemetry.append(reply["telemetry"])
                order.append(s)
            for s in SIDES:
                self._ask(s, {"op": "drop"}, "drop")
        return Paired(name, res["A"], res["B"], order)
