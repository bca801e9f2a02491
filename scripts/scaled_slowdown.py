"""Detection rate of the gate for an exact slowdown on real run-to-run noise (issue 3 acceptance).

Takes an A/A pair measured on a GPU (two runs of an unchanged stack), multiplies every sample of
the second run by ``1 + slowdown`` and gates it against the first with the default policy. The
result is what the gate does with a true slowdown of exactly that size plus the drift an
unchanged stack really shows between two runs (the on-device hook, ``--fp4-inject-slowdown``,
adds launch overhead of its own, so its realized slowdown is only known after the fact).

Usage: python scripts/scaled_slowdown.py A.json B.json [--slowdowns 0,3,4,5,6] [--drift 2]
"""

from __future__ import annotations

import argparse

from fp4bench.gate.baseline import load_baseline
from fp4bench.gate.verdict import Policy, compare


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--slowdowns", default="0,3,4,5,6", help="percent, comma-separated")
    ap.add_argument("--drift", type=float, default=Policy().drift * 100, help="policy drift in %%")
    args = ap.parse_args()
    base, run = load_baseline(args.a), load_baseline(args.b)
    for pct in (float(x) for x in args.slowdowns.split(",")):
        f = 1 + pct / 100
        cur = {n: ([s * f for s in r.samples], r.extra_info) for n, r in run.benchmarks.items()}
        res = compare(base, cur, base.availability, Policy(drift=args.drift / 100))
        c = res.counts()
        timed = sum(1 for v in res.verdicts if v.kind == "timing")
        print(f"slowdown {pct:4.1f}%  drift {args.drift:g}%: {c['FAIL']:3d} FAIL / {timed} timed "
              f"({c['FAIL'] / max(timed, 1):.0%}), {c['AMBIGUOUS']} AMBIGUOUS, {c['PASS']} PASS")


if __name__ == "__main__":
    main()
