"""``fp4bench`` command line: the command tree. ``fp4bench <command> ...`` runs the ``main`` of the
command's own module (``COMMANDS``); each command's options come from the option registry
(``fp4bench.options``, docs/options.md) and it calls the plain objects the pytest plugin uses too.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Sequence

USAGE = """usage: fp4bench <command> [args]

commands:
  env                          GPU, software stack and every backend with its availability reason
  compare BASE.json NEW.json   the gate's verdict on two saved runs (exit 0 pass, 1 regression, 2 usage, 3 incomplete)
  power A.json B.json [--slowdowns 0,3,5]   gate's FAIL rate on an A/A pair with B scaled by 1+s
  fidelity [--ms 1,64,1024]    GPU: timer's graph kernel time vs eager kernel time, same window
  baseline approve FILE        make a candidate run the approved baseline of its GPU model (slim format)
  baseline migrate FILE --out NEW   write a baseline file's slim form to NEW (never FILE itself)
  ab --a PY_OR_VENV --b PY_OR_VENV [--gpus all] [sweep options]   interleaved A/B of two stacks on this GPU
                               (--gpus: the benchmarks spread over several GPUs, A and B of each on one)
  units [--gpus all] [sweep options]   unit health: every GPU against its siblings, with its power limit,
                               clocks, temperature and throttling (exit 1: a unit flagged; 3: one GPU)
  calibrate [--processes 3] [--windows 4] [sweep options]   this unit's noise terms per benchmark class,
                               stored beside its baseline; prints the smallest slowdown each benchmark can show
  workload [--models M] [--batches B ...] [--tp T]   decode arithmetic: tokens/expert, intensity
  shapes [--models M] [--batches B] [--gpu NAME]     per-role M, N, K, tokens/expert, FLOP/byte, ridge point
  report RESULTS... --out DIR [--baseline-file BASE]   markdown + PNG plots of saved runs
  prepare [--backends ...]                         build FlashInfer's JIT modules before a run
  stack freeze --runner NAME [--python VENV] [--check]   pin a runner's venv in stack/NAME.txt (or compare)
  bisect PACKAGE GOOD BAD (--failed VERDICT.json | --only IDS)   which release made the benchmarks slower
                               (GOOD/BAD: versions or stack files; one cached venv and one ab per step)
  history BASELINE [--plot PNG]   every approval of an approved baseline in git: medians, stack changes
  --version                    fp4bench's version

exit status of every command: 2 usage error (nothing written), 4 an output could not be written
(docs/outputs.md); each command's --help lists its others
"""


#: command -> (module, entry function); each module also has ``build_parser()``
COMMANDS = {
    "env": ("fp4bench.cli.env", "env_main"), "compare": ("fp4bench.cli.compare", "compare_main"),
    "power": ("fp4bench.cli.power", "power_main"), "fidelity": ("fp4bench.cli.fidelity", "fidelity_main"),
    "baseline": ("fp4bench.cli.baseline", "baseline_main"), "ab": ("fp4bench.cli.ab", "ab_main"),
    "units": ("fp4bench.cli.units", "units_main"), "calibrate": ("fp4bench.cli.calibrate", "calibrate_main"),
    "workload": ("fp4bench.cli.workload", "workload_main"),
    "shapes": ("fp4bench.cli.shapes", "shapes_main"), "report": ("fp4bench.cli.report", "report_main"),
    "prepare": ("fp4bench.cli.prepare", "prepare_main"), "stack": ("fp4bench.cli.stack", "stack_main"),
    "bisect": ("fp4bench.cli.bisect", "bisect_main"), "history": ("fp4bench.cli.history", "history_main"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a µ or → on an ASCII-only terminal prints as '?', never crashes
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        from fp4bench import __version__

        print(f"fp4bench {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMANDS:
        module, func = COMMANDS[cmd]
        with sigterm_as_interrupt():
            return getattr(importlib.import_module(module), func)(rest)
    print(f"fp4bench: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (CI runners, ``timeout``, job schedulers) ends a command as Ctrl-C does: a
    ``KeyboardInterrupt`` in the main thread, so ``fp4bench ab`` / ``units`` kill their workers,
    judge what finished and report the rest as not reached. A second SIGTERM while that runs is
    the default action (the process ends at once). Outside the main thread: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt("SIGTERM: the command was stopped")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
