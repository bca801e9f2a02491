"""The same benchmarks on every GPU of the host, at once, in independent windows.

One worker process per GPU (``python -m fp4bench.run.worker``), pinned to it by UUID
(``gpus.devices.pin_env``, set before the worker's CUDA starts), all of one interpreter. The
first unit lists the sweep. Then, pass after pass, every benchmark takes one **window** on every
unit at the same moment: the units work in lockstep, each on the same benchmark, so they share
the host's situation (power delivery, cooling, ambient drift) as in production, where all of a
host's GPUs serve one model together, and whatever drifts over the check hits every unit alike.
A window is one independent measurement: the case is placed in fresh device memory, captured and
replayed for ``window_samples`` samples, its NVML telemetry polled alongside, and everything it
held is released afterwards (``drop`` with ``release``), so the next window allocates afresh. The
first window of a benchmark on a unit follows its correctness check (prepare + verify against
the reference, which is where a unit that computes wrong results shows). After ``windows``
passes the benchmarks the rule still calls MORE for some unit take further passes, up to
``max_windows``, while the time budget lasts.

A worker that dies or hangs costs its unit that window (named in ``Unit.crashes``); the next
request starts a fresh worker on the same GPU, up to ``MAX_STARTS`` per unit, after which the
unit's remaining windows are lost (its benchmarks are not judged). Ctrl-C (SIGTERM too: ``cli.main``
turns it into one) ends the check after killing the workers: what was measured is judged, the
rest is not reached, and a window the interrupt cut short is neither a crash nor a lost window.
"""

from __future__ import annotations

import statistics
import sys
import threading
from fp4bench import clock
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from fp4bench.gate.rule import Decision, RuleSettings
from fp4bench.gpus.devices import Gpu, pin_env
from fp4bench.measure.timing import TIMER_ENV
from fp4bench.run.case import OUT_OF_MEMORY
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.sweep import SweepOptions
from fp4bench.units.estimate import MIN_WINDOWS, against_siblings
from fp4bench.run.worker.interpreter import interpreter
from fp4bench.run.worker.pool import WorkerLost, WorkerSpec, close_all, spawn

#: worker starts a unit may use (its first and the replacements of dead ones)
MAX_STARTS = 3


@dataclass(frozen=True)
class UnitsConfig:
    sweep: SweepOptions
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    device: str | None = None
    windows: int = 3
    max_windows: int = 6
    window_samples: int = 10
    time_budget_s: float = 600.0
    timeout_s: float = 900.0
    settings: RuleSettings = RuleSettings(floor=0.10)
    cold_l2: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.windows <= self.max_windows:
            raise ValueError(f"--windows: need 2 <= windows <= max windows, got {self.windows} and {self.max_windows}")
        if self.window_samples < 3:
            raise ValueError(f"--window-samples: need at least 3, got {self.window_samples}")


@dataclass
class UnitPart:
    """One unit's part of one benchmark."""

    status: str = "pending"  # measured | failed | skipped | unsupported | lost | out of memory
    reason: str = ""
    #: the samples (seconds) of each window, in the order taken
    windows: list[list[float]] = field(default_factory=list)
    #: NVML during each window (the keys a pytest case records); empty on CPU
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    #: windows this unit lost to a worker that died or hung
    lost_windows: int = 0

    @property
    def medians(self) -> list[float]:
        return [float(statistics.median(w)) for w in self.windows]


@dataclass
class UnitBench:
    name: str
    #: GPU UUID -> that unit's part
    units: dict[str, UnitPart] = field(default_factory=dict)
    #: listed as skipped by the units' stack (nothing measured): why
    skip_reason: str = ""


@dataclass
class Unit:
    gpu: Gpu
    fingerprint: dict[str, Any] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    #: the test-only backends its worker registered (``{name: description}``)
    test_only: dict[str, str] = field(default_factory=dict)
    #: set when the unit ran out of worker starts: why
    dead: str = ""


@dataclass
class UnitsRun:
    units: list[Unit]
    benchmarks: list[UnitBench]
    settings: RuleSettings
    versions: dict[str, str | None] = field(default_factory=dict)
    passes: int = 0
    window_samples: int = 0
    #: benchmarks whose base windows an interrupted check never finished
    not_reached: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def _init(cfg: UnitsConfig) -> dict[str, Any]:
    return RunnerSettings(device=cfg.device, plugins=tuple(cfg.plugins), cold_l2=cfg.cold_l2, seed=cfg.seed).to_init()


def undecided(bench: UnitBench, settings: RuleSettings) -> bool:
    """Some unit's estimate is still MORE: another window on every unit would help."""
    medians = {u: p.medians for u, p in bench.units.items() if p.status == "measured" and len(p.windows) >= MIN_WINDOWS}
    if len(medians) < 2:
        return False
    for u, m in medians.items():
        _, d = against_siblings(m, {s: v for s, v in medians.items() if s != u}, settings, budget_left=True)
        if d is Decision.MORE:
            return True
    return False


class UnitRunner:
    def __init__(self, gpus: list[Gpu], cfg: UnitsConfig, progress: Callable[[str], None] | None = None):
        if len(gpus) < 2:
            raise ValueError(f"a unit-health check needs at least 2 GPUs, got {len(gpus)}")
        self.cfg = cfg
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        python = interpreter(cfg.python)
        self.units = [Unit(g) for g in gpus]
        self.workers = {g.uuid: spawn(WorkerSpec(python=python, env={**cfg.env, **pin_env(g), TIMER_ENV: "span"},
                                                 init=_init(cfg),
                                                 timeout_s=cfg.timeout_s, start_timeout_s=max(cfg.timeout_s, 300.0)),
                                      label=f"GPU {g.index} worker") for g in gpus}
        self._pool = ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="fp4bench-unit")
        self._t0 = clock.now()
        self._stopping = threading.Event()  # set on Ctrl-C: no request is sent, no worker restarted

    # -- workers ---------------------------------------------------------------------------
    def _start(self, unit: Unit) -> None:
        w = self.workers[unit.gpu.uuid]
        try:
            ready = w.start()
        except (WorkerLost, OSError) as exc:
            unit.crashes.append(f"start: {exc}")
            unit.dead = "its worker could not start (CRASH above)"
            self.progress(f"[GPU {unit.gpu.index}] could not start: {exc}")
            return
        self._ready(unit, ready)

    def _ready(self, unit: Unit, ready: dict[str, Any]) -> None:
        unit.fingerprint = unit.fingerprint or dict(ready.get("fingerprint") or {})
        unit.test_only = dict(ready.get("test_only") or {})
        if ready.get("pid") is not None:
            unit.pids.append(int(ready["pid"]))
        fp = ready.get("fingerprint") or {}
        self.progress(f"[GPU {unit.gpu.index}] worker {ready.get('pid')} on {unit.gpu.uuid}: {fp.get('gpu_name')} "
                      f"(torch {fp.get('torch')})")

    def _ask(self, unit: Unit, msg: dict[str, Any], what: str) -> dict[str, Any]:
        """One request; a dead worker is replaced by the next request (``Worker.request``) until the
        unit has used ``MAX_STARTS`` starts. ``WorkerLost`` to the caller."""
        w = self.workers[unit.gpu.uuid]
        if self._stopping.is_set():
            raise WorkerLost("the check was interrupted")
        if unit.dead:
            raise WorkerLost(unit.dead)
        if w.proc is None:
            if w.starts >= MAX_STARTS:
                unit.dead = f"{w.starts} workers lost on this GPU"
                raise WorkerLost(unit.dead)
            try:
                self._ready(unit, w.start())
            except (WorkerLost, OSError) as exc:
                unit.crashes.append(f"restart: {exc}")
                raise WorkerLost(str(exc)) from None
        return w.request(msg, what)

    def close(self, kill: bool = False) -> None:
        if kill:
            self._stopping.set()
        if kill:
            for w in self.workers.values():
                w.kill()
        else:
            close_all(self.workers.values())  # hung up at once: their exits overlap
        # a window still in flight ends at once (its worker is gone or the next request refused):
        # waiting for it means nothing is recorded after the run returned
        self._pool.shutdown(wait=True)

    # -- the check --------------------------------------------------------------------------
    def run(self, sweep_for: Callable[[dict], SweepOptions] | None = None) -> UnitsRun:
        self._t0 = clock.now()
        out = UnitsRun(self.units, [], self.cfg.settings, window_samples=self.cfg.window_samples)
        try:
            list(self._pool.map(self._start, self.units))
            live = [u for u in self.units if not u.dead]
            if not live:
                raise RuntimeError("no GPU's worker could start: " + "; ".join(
                    f"GPU {u.gpu.index}: {u.dead}" for u in self.units))
            models = sorted({str(u.fingerprint.get("gpu_name")) for u in live})
            if len(models) > 1:
                raise RuntimeError(f"the GPUs are of different models ({', '.join(models)}): compare units of one model")
            sweep = sweep_for(live[0].fingerprint) if sweep_for else self.cfg.sweep
            try:
                listed = self._ask(live[0], {"op": "cases", "sweep": sweep.to_dict()}, "listing the sweep")
            except WorkerLost as exc:
                raise RuntimeError(f"GPU {live[0].gpu.index} could not list the sweep: {exc}") from None
            if listed.get("status") != "listed":
                raise RuntimeError(f"the sweep could not be listed: {listed.get('reason')}")
        except BaseException:
            self.close(kill=True)
            raise
        out.versions = dict(listed.get("versions") or {})
        cases = {c["id"]: c for c in listed["cases"]}
        out.benchmarks = [UnitBench(c["id"], skip_reason=c["skip_reason"] or "") for c in listed["cases"]]
        timed = [b for b in out.benchmarks if not b.skip_reason]
        interrupted = False
        try:
            for p in range(self.cfg.max_windows):
                todo = timed if p < self.cfg.windows else [b for b in timed if undecided(b, self.cfg.settings)]
                if p >= self.cfg.windows and (not todo or self._elapsed() >= self.cfg.time_budget_s):
                    break
                for i, bench in enumerate(todo, 1):
                    self.progress(f"pass {p + 1}: {i}/{len(todo)} {bench.name}")
                    list(self._pool.map(lambda u, b=bench: self._window(u, b, cases[b.name]["case"]), self.units))
                out.passes = p + 1
        except KeyboardInterrupt:  # Ctrl-C / timeout -s INT: judge what was measured
            interrupted = True
            out.not_reached = [b.name for b in timed if self._unfinished(b)]
            self.progress(f"interrupted: {len(out.not_reached)} benchmarks without their base windows")
        finally:
            self.close(kill=interrupted)
        out.wall_s = self._elapsed()
        return out

    def _unfinished(self, bench: UnitBench) -> bool:
        """Some unit still owes this benchmark one of its base windows."""
        return len(bench.units) < len(self.units) or any(
            x.status in ("pending", "measured") and len(x.windows) + x.lost_windows < self.cfg.windows
            for x in bench.units.values())

    def _elapsed(self) -> float:
        return clock.now() - self._t0

    def _window(self, unit: Unit, bench: UnitBench, case: dict[str, Any]) -> None:
        """One window of ``bench`` on ``unit`` (after its check, the first time)."""
        part = bench.units.setdefault(unit.gpu.uuid, UnitPart())
        if part.status not in ("pending", "measured"):
            return
        where = f"[GPU {unit.gpu.index}]"
        dead = bool(unit.dead)
        try:
            if part.status == "pending":
                t0 = clock.now()
                reply = self._ask(unit, {"op": "check", "case": case}, f"check {bench.name}")
                part.status, part.reason = reply.get("status", "failed"), reply.get("reason", "")
                if part.status != "measured":
                    self.progress(f"{where} {bench.name}: {part.status} ({part.reason.splitlines()[0][:200] if part.reason else ''})")
                    return
                self.progress(f"{where} checked {bench.name} in {clock.now() - t0:.1f} s")
            reply = self._ask(unit, {"op": "time", "case": case, "samples": self.cfg.window_samples,
                                     "kernel_time": False}, f"window {len(part.windows) + 1} of {bench.name}")
            if reply.get("status") == "measured":
                part.windows.append(list(reply["timing"]["samples_s"]))
                if reply.get("telemetry"):
                    part.telemetry.append(dict(reply["telemetry"]))
            elif reply.get("status") == OUT_OF_MEMORY:  # a resource failure, never a wrong output
                part.status, part.reason = OUT_OF_MEMORY, f"during timing: {reply.get('reason')}"
            else:
                part.status, part.reason = "failed", f"during timing: {reply.get('reason')}"
            # everything the window held goes back: the next window allocates afresh
            self._ask(unit, {"op": "drop", "release": True}, f"release after {bench.name}")
        except WorkerLost as exc:
            if self._stopping.is_set():  # killed by an interrupt (Ctrl-C / SIGTERM): not reached, not lost
                return
            part.lost_windows += 1
            if not dead:  # a unit out of workers is named once, not at every window it misses
                unit.crashes.append(f"{bench.name}: {exc}")
                self.progress(f"{where} LOST during {bench.name}: {exc}")
            if unit.dead and len(part.windows) < MIN_WINDOWS:
                part.status, part.reason = "lost", unit.dead
            elif part.status == "pending":
                part.status, part.reason = "lost", str(exc)
