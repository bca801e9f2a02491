"""``fp4bench`` command line: ``env``, ``compare``, ``power``, ``fidelity``, ``baseline approve``, ``workload``, ...

A thin layer: each subcommand calls the plain objects the pytest plugin uses too.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

USAGE = """usage: fp4bench <command> [args]

commands:
  env                          GPU, software stack and every backend with its availability reason
  compare BASE.json NEW.json   noise-aware regression verdict (exit 0 pass, 1 regression, 2 usage)
  power A.json B.json [--slowdowns 0,3,5]   gate's FAIL rate on an A/A pair with B scaled by 1+s
  fidelity [--ms 1,64,1024]    GPU: timer's graph kernel time vs eager kernel time, same window
  baseline approve FILE        make a candidate run the approved baseline of its GPU model (slim format)
  baseline migrate FILE        rewrite a baseline file in the slim format
  ab --a PY_OR_VENV --b PY_OR_VENV [--gpus all] [sweep options]   interleaved A/B of two stacks on this GPU
                               (--gpus: the benchmarks spread over several GPUs, A and B of each on one)
  units [--gpus all] [sweep options]   unit health: every GPU against its siblings, with its power limit,
                               clocks, temperature and throttling (exit 1: a unit flagged; 3: one GPU)
  workload [--model M] [--batch B ...] [--tp T]   decode arithmetic: tokens/expert, intensity
  shapes [--model M] [--batch B] [--gpu NAME]      per-role M, N, K, tokens/expert, FLOP/byte, ridge point
  report RESULTS... --out DIR [--baseline BASE]   markdown + PNG plots of saved runs
  prepare [--backends ...]                         build FlashInfer's JIT modules before a run
  stack freeze --runner NAME [--python VENV] [--check]   pin a runner's venv in stack/NAME.txt (or compare)
  --version                    fp4bench's version
"""


def _env(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="fp4bench env")
    ap.add_argument("--device", default=None, help="torch device (default cuda:0 if present, else cpu)")
    ap.add_argument("--plugin", action="append", default=[], help="backend module to load (like --fp4-plugin)")
    args = ap.parse_args(argv)
    import torch

    from fp4bench.backends.base import availability_of
    from fp4bench.backends.registry import all_backends, load_plugin
    from fp4bench.env import collect_fingerprint, parse_device

    try:
        for mod in args.plugin:
            load_plugin(mod)
        dev = parse_device(args.device or ("cuda:0" if torch.cuda.is_available() else "cpu"), "--device")
    except ValueError as exc:
        print(f"fp4bench env: {exc}", file=sys.stderr)
        return 2
    fp = collect_fingerprint(dev)
    print("fingerprint:")
    for k, v in fp.to_dict().items():
        print(f"  {k:<20} {v}")
    print("\nbackends:")
    for b in all_backends():
        a = availability_of(b, dev)  # one broken backend is listed with its error, not a crash
        state, reason, ver = ("available" if a.ok else "skipped"), a.reason, a.version
        kinds = ",".join(sorted(b.kinds))
        print(f"  {b.name:<24} {state:<9} [{kinds}] {ver or '-'}: {reason}")
    return 0


def _baseline(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="fp4bench baseline")
    from fp4bench.options.registry import BASELINES

    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("approve", help="write a candidate run as baselines/<gpu>/approved.json (slim format)")
    a.add_argument("candidate", help="the candidate run (a --fp4-save-baseline JSON file)")
    BASELINES.add(a.add_argument)
    a.add_argument("--force", action="store_true",
                   help="approve even a run with failures/regressions, fewer benchmarks than the approved "
                        "baseline, or another L2 mode/timer (never a run of test-only backends)")
    m = sub.add_parser("migrate", help="rewrite a baseline file in the slim format (nothing is judged)")
    m.add_argument("file", help="the baseline file to rewrite")
    m.add_argument("--out", default=None, help="write here (default: rewrite FILE in place; never an "
                   "approved.json: use 'baseline approve')")
    m.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    args = ap.parse_args(argv)
    from fp4bench.gate.baseline import BaselineError
    from fp4bench.gate.approve import approve, migrate
    from fp4bench.outputs import OutputError, check_output, check_output_dir

    try:  # output paths before anything is read (fp4bench.outputs)
        if args.cmd == "migrate" and args.out is not None:
            check_output(args.out, "--out", inputs=[args.file], force=args.force)
        if args.cmd == "approve":
            check_output_dir(args.baselines, "--baselines")
    except OutputError as exc:
        print(f"fp4bench baseline {args.cmd}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.cmd == "migrate":
            out = migrate(args.file, args.out)
            print(f"slim baseline written: {out} ({out.stat().st_size} bytes)")
            return 0
        res = approve(args.candidate, args.baselines, force=args.force)
    except BaselineError as exc:
        print(f"fp4bench baseline {args.cmd}: {exc}", file=sys.stderr)
        return 2
    print(f"approved: {res.approved} (slim format; "
          + ("the file it replaced is in git's history)" if res.replaced else "the first approved baseline of this GPU)"))
    if res.unit is not None:
        print(f"this unit's own baseline: {res.unit} (preferred by runs on that GPU)")
    elif res.units:
        print(f"each unit's own baseline ({len(res.units)} GPUs measured this run; each file holds the "
              "benchmarks that GPU measured):")
        print("\n".join(f"  {path} ({n} benchmarks)" for path, n in res.units))
    if res.dropped:
        print(f"no longer gated ({len(res.dropped)} benchmarks of the previous baseline):")
        print("\n".join(f"  {n}" for n in res.dropped))
    if res.added:
        print(f"newly gated: {len(res.added)} benchmarks")
    return 0


def _workload(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="fp4bench workload")
    ap.add_argument("--model", default="glm-5", help="model name or alias (default %(default)s)")
    ap.add_argument("--batch", default="512,1024", help="decode batch sizes, comma-separated (default %(default)s)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default %(default)d)")
    args = ap.parse_args(argv)
    from fp4bench.options.registry import parse_ints
    from fp4bench.workload.decode import arithmetic_intensity, expected_active_experts, get_model, mean_tokens_per_expert

    try:
        m = get_model(args.model)
        batches = parse_ints(args.batch, "batch")
        m.check_tp(args.tp)
    except ValueError as exc:
        print(f"fp4bench workload: {exc}", file=sys.stderr)
        return 2
    (gn, gk), (dn, dk) = m.gate_up_nk(args.tp), m.down_nk(args.tp)
    print(f"{m.name}: H={m.hidden} I={m.moe_intermediate} E={m.num_experts} top_k={m.top_k} TP={args.tp}")
    print(f"{'batch':>6} {'tokens/expert':>14} {'active experts':>15} {'gate_up FLOP/B':>15} {'down FLOP/B':>12}")
    for b in batches:
        t = mean_tokens_per_expert(m, b)
        act = expected_active_experts(m.num_experts, m.top_k, b)
        print(f"{b:>6} {t:>14.2f} {act:>15.1f} {arithmetic_intensity(t, gn, gk):>15.2f} "
              f"{arithmetic_intensity(t, dn, dk):>12.2f}")
    return 0


#: subcommands that live in their own module: name -> (module, entry function)
_MORE = {"shapes": ("fp4bench.cli.shapes", "shapes_main"), "report": ("fp4bench.cli.report", "report_main"),
         "prepare": ("fp4bench.cli.prepare", "prepare_main"), "ab": ("fp4bench.cli.ab", "ab_main"),
         "power": ("fp4bench.cli.power", "power_main"), "fidelity": ("fp4bench.cli.fidelity", "fidelity_main"),
         "stack": ("fp4bench.cli.stack", "stack_main"), "units": ("fp4bench.cli.units", "units_main")}


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
    if cmd == "env":
        return _env(rest)
    if cmd == "compare":
        from fp4bench.cli.compare import compare_main

        return compare_main(rest)
    if cmd == "baseline":
        return _baseline(rest)
    if cmd == "workload":
        return _workload(rest)
    if cmd in _MORE:
        module, func = _MORE[cmd]
        return getattr(__import__(module, fromlist=[func]), func)(rest)
    print(f"fp4bench: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2
