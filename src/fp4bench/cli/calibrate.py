"""``fp4bench calibrate [--processes 3] [--windows 4] [sweep options]``: this unit's noise terms.

On a runner's first bring-up and after a driver change: measures, on this GPU and through the
run code (worker processes building the same ``CaseRunner`` a run builds), how a benchmark's
window median moves within a window, between windows of one placement, between fresh placement
sets, between processes and over the run, per benchmark class (dense µs rows, grouped, MoE), in
a bounded time (``--run-budget``); stores the terms beside the unit's baseline
(``<baselines>/<gpu>/units/<UUID>.calibration.json``), where the gate reads them
(``gate.calibration``), and prints the smallest slowdown the stored gate can show on each
benchmark at the default budget. Exit 0 = written, 2 = usage error, 3 = too little measured.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.cli.command import EXIT_INCOMPLETE, fail, parser, plain, print_safely, run

PROG = "fp4bench calibrate"


def build_parser() -> argparse.ArgumentParser:
    return parser("calibrate", description=plain(__doc__.split("\n\n")[1]),
                  epilog="exit status: 0 written, 2 usage error, 3 too little measured to store")


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from fp4bench.gate.calibration import calibration_path
    from fp4bench.gate.store import gpu_dir, utc_stamp
    from fp4bench.measure.timing import TimingConfig
    from fp4bench.options.registry import option
    from fp4bench.outputs import OutputError, check_output, write_atomic
    from fp4bench.run.calibrate import calibrate, to_calibration
    from fp4bench.run.settings import RunnerSettings
    from fp4bench.run.sweep import sweep_options
    from fp4bench.run.worker.interpreter import interpreter
    from fp4bench.run.worker.pool import WorkerSpec

    def given(name: str):
        return getattr(args, name.replace("-", "_"), None)

    try:
        sweep = sweep_options(given, {}, on_gpu=args.device != "cpu")
        timing = TimingConfig(min_samples=args.window_samples, max_samples=args.window_samples, target_rel_ci=None)
        settings = RunnerSettings(device=args.device, plugins=tuple(args.plugin), timing=timing,
                                  cold_l2=args.l2 == "cold", seed=args.seed,
                                  **({"min_copies": args.min_copies} if args.min_copies else {}))
        spec = WorkerSpec(python=interpreter(args.python or sys.executable), init=settings.to_init(),
                          timeout_s=args.case_timeout, start_timeout_s=max(args.case_timeout, 300.0))
    except ValueError as exc:
        return fail(PROG, exc)
    out: list = []

    def one_unit(fingerprint) -> None:
        """Before anything is measured: the device is one GPU unit and its file may be written."""
        if not fingerprint.get("gpu_uuid") or not fingerprint.get("gpu_slug"):
            raise ValueError("this device has no GPU UUID: a calibration belongs to one GPU unit")
        path = calibration_path(gpu_dir(args.baselines, fingerprint["gpu_slug"]), fingerprint["gpu_uuid"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a unit's first file: its units/ folder
            out.append(check_output(path, "--baselines", force=args.force))
        except (OSError, OutputError) as exc:
            raise ValueError(f"--baselines: cannot write {path}: {exc}") from None

    try:
        measured, facts = calibrate(spec, sweep.to_dict(), processes=args.processes, windows=args.windows,
                                    per_class=args.per_class, budget_s=args.run_budget,
                                    progress=lambda line: print(f"{PROG}: {line}", file=sys.stderr),
                                    check_device=one_unit)
    except (RuntimeError, ValueError) as exc:
        return fail(PROG, exc)
    cal = to_calibration(measured, facts, utc_stamp(), floor=args.floor / 100.0, base_windows=3,
                         max_windows=option("max-windows").default)
    if not cal.classes:
        print_safely(f"{PROG}: too little measured to store a calibration (each class needs 3 passes in 2 "
                     f"processes; --run-budget {args.run_budget:g} s ran {facts['processes']} processes)")
        return EXIT_INCOMPLETE
    path = out[0]
    print_safely(report(cal))
    write_atomic(path, cal.text())
    print_safely(f"calibration written to {path} ({facts['wall_s']:g} s)")
    return 0


def report(cal) -> str:
    """The terms per class and each benchmark's smallest slowdown the stored gate can FAIL."""
    lines = [f"unit {cal.unit}: {cal.run.get('processes')} processes x {cal.run.get('windows')} passes, "
             f"{cal.run.get('wall_s')} s"]
    for cls, m in cal.classes.items():
        lines.append(f"  {cls}: within ±{m['within'] * 100:.2f}%, window ±{m['window'] * 100:.2f}%, placement "
                     f"±{m['placement'] * 100:.2f}%, process ±{m['process'] * 100:.2f}%, drift {m['drift'] * 100:.2f}% "
                     f"({m['benchmarks']} benchmarks)")
    from fp4bench.gate.calibration import describe_classes

    lines += ["rule terms: " + "; ".join(describe_classes(cal.terms("this calibration")))]
    lines.append("smallest slowdown the stored gate can FAIL (3 baseline windows, the default new windows):")
    for name, b in sorted(cal.benchmarks.items(), key=lambda kv: (kv[1]["class"], kv[0])):
        least = b.get("smallest_fail_pct")
        lines.append(f"  {b['class']:<7} {'-' if least is None else format(least, '+.1f') + '%':>7}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(calibrate_main(sys.argv[1:]))
