"""The worker process: reads requests on stdin, answers on the original stdout.

Library output (prints, FlashInfer JIT progress) goes to stderr: file descriptor 1 is moved to
2 before anything is imported, so only protocol lines reach the parent's pipe. After every
case on CUDA the context is checked; a sticky error ends the process after its answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import sys
import traceback
from typing import Any, TextIO

from fp4bench.run.factory import runner_of
from fp4bench.run.worker import protocol


class Child:
    def __init__(self, init: dict[str, Any]):
        self.device, self.fingerprint, self.runner = runner_of(init)
        self._calls: dict[str, tuple[Any, list, Any]] = {}  # case key -> (backend, timed callables, capture)
        # NVML around each timing round (``fp4bench ab``): on a GPU only (a CPU run has no GPU
        # clocks to report); ``nvml`` injects a pynvml-like object (tests)
        self.telemetry = self.device.type == "cuda"
        self.nvml: Any = None

    # -- requests -------------------------------------------------------------------------
    def _case(self, case: dict[str, Any]):
        """(backend, problem, tactic) or a CaseResult saying why this environment cannot run it."""
        from fp4bench.backends.registry import get_backend
        from fp4bench.run.case import SKIPPED, UNSUPPORTED, CaseResult

        problem = protocol.decode_problem(case["problem"])
        try:
            backend = get_backend(case["backend"])
        except ValueError as exc:
            return CaseResult(SKIPPED, f"not in this environment: {exc}")
        avail = backend.availability(self.device)
        if not avail.ok:
            return CaseResult(SKIPPED, f"{backend.name}: {avail.reason}")
        tactics = {t.label: t for t in backend.tactics(problem, self.device)}
        tactic = tactics.get(case["tactic"])
        if tactic is None:
            return CaseResult(UNSUPPORTED, f"{backend.name} {avail.version or ''} does not list tactic "
                                           f"{case['tactic']!r} for {problem.id} in this environment")
        return backend, problem, tactic

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        from fp4bench.run.case import CaseResult

        got = self._case(req["case"])
        if isinstance(got, CaseResult):
            return protocol.encode_result(got)
        backend, problem, tactic = got
        res = self.runner.run(backend, problem, tactic, measure=req.get("measure", True))
        return protocol.encode_result(res)

    def check(self, req: dict[str, Any]) -> dict[str, Any]:
        """Correctness only, plus a digest of the operand bytes both sides must share. ``memory``:
        also this process's device-memory peak during the check (prepare, reference, verify, a
        library's autotuning) and the GPU's free memory after it (``device_memory``)."""
        from fp4bench.run.case import OUT_OF_MEMORY, CaseResult

        got = self._case(req["case"])
        if isinstance(got, CaseResult):
            return protocol.encode_result(got)
        backend, problem, tactic = got
        self._reset_peak()
        res = self.runner.run(backend, problem, tactic, measure=False)
        out = protocol.encode_result(res)
        if res.status != OUT_OF_MEMORY:  # out of memory, the runner released its operands: no digest
            ops = self.runner.operands(problem, backend.act_format, backend.weight_format)
            out["operand_digest"] = operand_digest(ops)
        if req.get("memory"):
            out["memory"] = device_memory(self.device)
        return out

    def _reset_peak(self) -> None:
        """Start the peak a ``memory`` reply reports from what this process holds now."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)

    def time(self, req: dict[str, Any]) -> dict[str, Any]:
        """One short timing round with a fixed sample count (no stop rule: rounds stay equal).

        The case is warmed up, sized and captured on its first round and replayed as captured in
        every later round until ``drop``, so a round costs its samples, not a capture.
        ``kernel_time`` (default: the worker's timing config) picks CUPTI busy time or the event
        span of each replay. ``memory``: also report this process's device-memory peak since the
        capture began (the check's is in the check's reply) and the GPU's free memory after the
        capture (``device_memory``).
        ``place`` (``fp4bench ab --placement round``): before this round, move the case to fresh
        device memory: the capture and every cached operand set are released to the driver, the
        operands are made again from the seed (the same bytes), with new rotating copies, and
        captured again with the calls per sample of the first capture. Every capture already
        rotates over ``min_copies`` or more copies, each its own allocation, so one capture
        averages that many placements (measure.copies); ``place`` adds the placements of later
        rounds, at the cost of one re-preparation a round."""
        from fp4bench.measure.timing import prime_gpu, time_cpu, time_gpu

        key = json.dumps(req["case"], sort_keys=True)
        n = int(req.get("samples", 10))
        cfg = dataclasses.replace(self.runner.timing, min_samples=max(3, n), max_samples=max(3, n),
                                  target_rel_ci=None, time_budget_s=0.0)
        if "kernel_time" in req:
            cfg = dataclasses.replace(cfg, kernel_time=bool(req["kernel_time"]))
        sized = None
        if req.get("place") and key in self._calls:
            sized = self._calls[key][2]
            self._calls = {}
            self.runner.release()
        if key not in self._calls:
            got = self._case(req["case"])
            if not isinstance(got, tuple):
                return protocol.encode_result(got)
            backend, problem, tactic = got
            self._reset_peak()
            fns = self.runner.timed_calls(backend, problem, tactic)
            cap = (prime_gpu(fns, cfg, self.device, backend.no_graph_reason, sized=sized)
                   if self.device.type == "cuda" else None)
            self._calls = {key: (backend, fns, cap)}
        backend, fns, cap = self._calls[key]
        with self._sampler() as tel:
            if self.device.type == "cuda":
                t = time_gpu(fns, cfg, self.device, backend.no_graph_reason, primed=cap)
            else:
                t = time_cpu(fns, dataclasses.replace(cfg, mode="cpu"))
        out = {"status": "measured", "reason": "", "timing": protocol.finite(dataclasses.asdict(t))}
        if tel is not None and tel.result is not None:
            out["telemetry"] = protocol.finite(tel.result.to_extra_info())  # the keys a pytest case records
        if req.get("memory"):
            out["memory"] = device_memory(self.device)
        return out

    def _sampler(self):
        """NVML polled on its own thread during the round (never inside the timed thread), or a
        no-op where there is no telemetry to take."""
        import contextlib

        from fp4bench.measure.telemetry import for_device

        if not self.telemetry:
            return contextlib.nullcontext(None)
        return for_device(self.device, nvml=self.nvml)

    def cases(self, req: dict[str, Any]) -> dict[str, Any]:
        """The sweep as this environment lists it (its libraries decide the tactics)."""
        from fp4bench.backends.registry import all_backends
        from fp4bench.run.sweep import SweepOptions, cases_for

        opts = SweepOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in req["sweep"].items()})
        specs = cases_for(opts, all_backends(), self.device)
        versions = {}
        for b in all_backends():
            try:
                versions[b.name] = b.availability(self.device).version
            except Exception as exc:  # one broken backend must not hide the others' versions
                versions[b.name] = f"availability() raised {type(exc).__name__}"
        return {"status": "listed", "versions": versions,
                "cases": [{"id": c.id, "case": protocol.encode_case(c.backend, c.problem, c.tactic.label),
                           "skip_reason": c.skip_reason, "note": c.note} for c in specs]}

    def memory(self, req: dict[str, Any]) -> dict[str, Any]:
        """This process's peak since its last check or capture began and the GPU's free memory now."""
        return {"status": "memory", "memory": device_memory(self.device)}

    def drop(self, req: dict[str, Any]) -> dict[str, Any]:
        """Forget the captured case; ``release``: also every cached operand set and reference,
        with the freed device memory handed back (another process needs it next), and with
        ``placement`` a fresh placement set for what comes next (``CaseRunner.new_placement``)."""
        self._calls = {}
        if req.get("release"):
            self.runner.release()
            if req.get("placement") is not None:  # the next window's fresh placement set
                self.runner.new_placement(int(req["placement"]))
        else:
            self.runner.drop_prepared()
        out: dict[str, Any] = {"status": "dropped"}
        if req.get("release") and self.device.type == "cuda":
            import torch

            out["held_bytes"] = int(torch.cuda.memory_reserved(self.device))  # what a release left behind
        return out

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        """One request's reply. A case that ran out of device memory (raised here, or returned
        by the runner) answers ``OUT_OF_MEMORY`` with this process's memory report."""
        from fp4bench.run.case import FAILED, OUT_OF_MEMORY
        from fp4bench.measure.health import context_health, looks_sticky, out_of_memory

        op = req.get("op")
        fn = {"run": self.run, "check": self.check, "time": self.time, "drop": self.drop,
              "cases": self.cases, "memory": self.memory}.get(op)
        if fn is None:
            return {"status": FAILED, "reason": f"worker: unknown request op {op!r}"}
        try:
            out = fn(req)
        except Exception as exc:
            why = f"raised {type(exc).__name__}: {exc}"
            if out_of_memory(exc):
                self._calls = {}
                self.runner.release()
                out = {"status": OUT_OF_MEMORY, "reason": why}
                return {**out, "memory": device_memory(self.device)}
            health = context_health(self.device) if self.device.type == "cuda" else ""
            if looks_sticky(exc) or health:
                return {"status": FAILED, "reason": f"CUDA context poisoned: {why}", "fatal": health or why}
            return {"status": FAILED, "reason": why, "traceback": traceback.format_exc(limit=8)}
        if out.get("status") == OUT_OF_MEMORY:
            out["memory"] = device_memory(self.device)
        if self.device.type == "cuda":
            health = context_health(self.device)
            if health:
                out.update(status=FAILED, reason=f"CUDA context poisoned after this case: {health}", fatal=health)
        return out


def device_memory(device: Any) -> dict[str, int] | None:
    """``{"peak": bytes, "free": bytes, "total": bytes}``: the most this process's allocator held
    since the peak was last reset (when a check or a capture began: what another process running
    that step of the same case needs), and the GPU's free and total memory after the cached
    blocks this process no longer uses went back to the driver. None off CUDA."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return {"peak": int(torch.cuda.max_memory_reserved(device)), "free": int(free), "total": int(total)}


def operand_digest(ops: Any) -> str:
    """sha256 over every tensor of an operand set (shape, dtype and up to 2^20 evenly spaced
    elements of each): equal digests mean both environments drew and quantized the same bytes."""
    import torch

    h = hashlib.sha256()

    def visit(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            flat = obj.detach().reshape(-1)
            step = max(1, flat.numel() // (1 << 20))
            part = flat[::step].contiguous().cpu()
            h.update(f"{tuple(obj.shape)}{obj.dtype}".encode())
            h.update(part.view(torch.uint8).numpy().tobytes() if part.numel() else b"")
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                if f.name != "problem":
                    visit(getattr(obj, f.name))

    visit(ops)
    return h.hexdigest()


def preload() -> None:
    """Import the libraries every worker needs while the parent has not sent ``init`` yet (no
    CUDA call: ``import torch`` does not create a context), so that workers launched together
    import in parallel. A failure here is left for ``Child`` to raise and report."""
    try:
        import numpy  # noqa: F401
        import scipy.stats  # noqa: F401
        import torch  # noqa: F401

        import fp4bench.run.case  # noqa: F401
    except Exception:
        pass


def serve(inp: TextIO, out: TextIO) -> int:
    preload()
    first = inp.readline()
    if not first:
        return 0
    child, hello = open_child(json.loads(first), os.getpid())
    out.write(protocol.dumps(hello))
    out.flush()
    if child is None:
        return 2
    for line in inp:
        if not line.strip():
            continue
        reply = answer(child, json.loads(line))
        out.write(protocol.dumps(reply))
        out.flush()
        if reply.get("fatal"):
            return 3  # a poisoned context is never reused
    return 0


def open_child(init: dict[str, Any], pid: int) -> tuple[Child | None, dict[str, Any]]:
    """The ``Child`` an ``init`` message describes and its first line (the ``ready`` record), or
    None and the ``error`` record naming why it could not start (a bad device, a plugin that fails)."""
    try:
        child = Child(init)
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        return None, {"type": "error", "error": f"{type(exc).__name__}: {lines[0] if lines else ''}"}
    from fp4bench.backends.registry import test_only

    return child, {"type": "ready", "pid": pid, "fingerprint": child.fingerprint.to_dict(),
                   "python": sys.executable, "test_only": test_only()}


def answer(child: Child, req: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` line for one request (a ``fatal`` one is the child's last)."""
    reply = child.handle(req)
    reply["type"] = "result"
    return protocol.finite(reply)


def main() -> int:
    # Ctrl-C in a terminal reaches the whole process group: the parent decides what an interrupt
    # stops (it kills a worker that is answering, closes the stdin of an idle one), so a worker
    # never dies of it mid-reply with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed to stdout lands on stderr
    sys.stdout = sys.stderr
    return serve(sys.stdin, proto)
