"""``fp4bench ab`` on several GPUs of one host: each GPU runs its own share of the benchmarks.

Both sides of a benchmark always run on the same GPU: each GPU gets an ``AbRunner`` whose A and
B worker processes are pinned to it by UUID (``gpus.devices.pin_env``: ``CUDA_VISIBLE_DEVICES``
set in the worker's environment before it starts, so inside the worker the GPU is ``cuda:0``).
The runners run at once, one thread each (a runner mostly waits on its workers' pipes). Each
lists the sweep with its own workers and keeps its share (``shares``): the listed benchmarks'
(backend, problem) families spread over the GPUs longest-first (``gpus.partition``), the same
partition in every runner since they list the same sweep. ``ab.merge`` turns the GPUs' runs into
one run to judge.

A runner that raises (a side that cannot start on that GPU, a listing that fails, a bug) ends
only its own share: what it finished is kept (``AbRunner.salvage``) and the rest of its share is
reported unjudged. Ctrl-C stops every runner at its next request (``AbRunner.stop``).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Callable, Collection

from fp4bench.ab.config import AbConfig, Side

from fp4bench.ab.records import GpuPart

from fp4bench.ab.run import AbRunner
from fp4bench.gpus.devices import Gpu, pin_env
from fp4bench.gpus.partition import assign, family_cost
from fp4bench.run.sweep import SweepOptions
from fp4bench.run.worker.protocol import decode_problem


def _entry(name: str, by_side: dict[str, dict[str, dict]]) -> dict:
    return by_side["A"].get(name) or by_side["B"][name]


def _skipped(name: str, by_side: dict[str, dict[str, dict]]) -> bool:
    """Listed as skipped (or absent) on both sides: nothing is measured, it costs nothing."""
    return all(by_side[s].get(name) is None or by_side[s][name]["skip_reason"] for s in ("A", "B"))


def shares(names: list[str], by_side: dict[str, dict[str, dict]], n: int) -> list[list[str]]:
    """The listed ``names`` split over ``n`` GPUs by (backend, problem) family, longest-first
    (``gpus.partition``); each share keeps the listing's order (one problem's benchmarks in a row,
    so a GPU draws each problem's operands once)."""
    families: list[tuple[tuple[str, str], float]] = []
    family: dict[str, tuple[str, str]] = {}
    for name in names:
        case = _entry(name, by_side)["case"]
        problem = decode_problem(case["problem"])
        family[name] = (case["backend"], problem.id)
        families.append((family[name], family_cost(problem, 0 if _skipped(name, by_side) else 1)))
    where = assign(families, n)
    return [[name for name in names if where[family[name]] == i] for i in range(n)]


def pinned(side: Side, gpu: Gpu) -> Side:
    """``side`` with its workers pinned to ``gpu`` (its own environment cannot override the pin)."""
    return dataclasses.replace(side, env={**side.env, **pin_env(gpu)})


def run_on_gpus(gpus: list[Gpu], a: Side, b: Side, cfg: AbConfig,
                sweep_for: Callable[[dict], SweepOptions] | None = None,
                progress: Callable[[str], None] | None = None, only: Collection[str] | None = None) -> list[GpuPart]:
    """One ``AbRunner`` per GPU, all at once; each GPU's part (its run, or why it stopped).
    ``only``: the benchmark ids to run (None: every one listed)."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    parts = [GpuPart(g.index, g.uuid, g.name) for g in gpus]
    runners = [AbRunner(pinned(a, g), pinned(b, g), cfg, progress=lambda line, g=g: say(f"[GPU {g.index}] {line}"),
                        prefix=f"g{g.index}.") for g in gpus]

    def work(i: int) -> None:
        runner, part = runners[i], parts[i]

        def mine(names: list[str], by_side: dict) -> list[str]:
            names = [n for n in names if only is None or n in only]
            part.listed, part.planned = names, shares(names, by_side, len(gpus))
            part.benchmarks = part.planned[i]
            return part.benchmarks

        try:
            part.run = runner.run(sweep_for, select=mine)
        except KeyboardInterrupt:  # stopped before it listed: its share is not reached
            part.run = runner.salvage()
        except BaseException as exc:  # noqa: BLE001 - one GPU's failure ends only its own share
            lines = str(exc).strip().splitlines()
            part.error = type(exc).__name__ + (f": {lines[0]}" if lines else "")
            part.run = runner.salvage()
            say(f"[GPU {gpus[i].index}] run stopped: {part.error}")

    threads = [threading.Thread(target=work, args=(i,), name=f"fp4bench-ab-gpu{g.index}", daemon=True)
               for i, g in enumerate(gpus)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short joins: Ctrl-C reaches this (the main) thread
    except KeyboardInterrupt:
        say("interrupted: stopping every GPU's run (its workers killed)")
        for r in runners:
            r.interrupt()
        for t in threads:
            t.join()
    return parts
