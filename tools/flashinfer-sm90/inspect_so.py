#!/usr/bin/env python3
"""Report on a built fused-MoE module: size, NEEDED libraries, undefined symbols, TU times.

Why: the reduced W4A16 module leaves the launchers of the dropped TUs undefined on purpose;
this checks that *only* those (plus driver / runtime / tvm-ffi / libc symbols) are undefined,
that the module does not depend on libpython or libtorch (so a build made with Python 3.11 /
torch 2.13 loads under Python 3.12 / torch 2.11), and summarizes per-TU compile seconds from
ninja's log.

    python inspect_so.py MODULE.so [BUILD_DIR/.ninja_log [TU_TIMES.txt]]   # JSON
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

#: undefined-symbol families that a correct load resolves from elsewhere
_RESOLVED_ELSEWHERE = {
    "libc/libstdc++/libgcc": re.compile(r"@(GLIBC|GLIBCXX|CXXABI|GCC)_"),
    "cuda driver": re.compile(r"^cu[A-Z]"),
    "cuda runtime": re.compile(r"^(cuda|__cuda)"),
    "nvrtc": re.compile(r"^nvrtc"),
    "tvm-ffi": re.compile(r"TVMFFI|tvm3ffi|^_ZN3tvm3ffi"),
}


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def undefined_symbols(path: str) -> dict[str, object]:
    """Classify the module's undefined dynamic symbols."""
    raw = [ln.split()[-1] for ln in _run(["nm", "-D", "--undefined-only", path]).splitlines() if ln.strip()]
    families: Counter[str] = Counter()
    other: list[str] = []
    for sym in raw:
        fam = next((k for k, rx in _RESOLVED_ELSEWHERE.items() if rx.search(sym)), None)
        if fam:
            families[fam] += 1
        else:
            other.append(sym)
    demangled = _run(["c++filt"] + other).splitlines() if other else []
    kinds: Counter[str] = Counter()
    for d in demangled:
        m = re.search(r"(\w+_kernelLauncher|\w+KernelLauncher|MoeGemmRunner<[^>]*|\w+)(?=<|\()", d)
        kinds[m.group(1) if m else d[:60]] += 1
    # A W4A16 call path through an undefined function would die at run time: flag any bf16 x FP4 one.
    w4a16 = [d for d in demangled if re.search(r"<__nv_bfloat16, (\S*SafeFP4|\S*Fp4Type|\S*e2m1\w*)[,>]", d)]
    return {"count": len(raw), "resolved_elsewhere": dict(families), "other_count": len(other),
            "other_by_function": dict(kinds.most_common(40)), "other_examples": demangled[:10],
            "bf16_fp4_undefined": w4a16[:20], "bf16_fp4_undefined_count": len(w4a16)}


def needed(path: str) -> list[str]:
    out = _run(["readelf", "-d", path])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def bind_now(path: str) -> bool:
    out = _run(["readelf", "-d", path])
    return bool(re.search(r"\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW", out))


def ninja_times(log: str) -> dict[str, object]:
    """Per-output compile seconds from a .ninja_log (v5: start end mtime path hash, in ms)."""
    rows = []
    with open(log) as f:
        for ln in f:
            if ln.startswith("#"):
                continue
            start, end, _mtime, out = ln.split("\t")[:4]
            rows.append((os.path.basename(out), (int(end) - int(start)) / 1000.0))
    last = {}
    for name, secs in rows:
        last[name] = secs
    gen = {k: v for k, v in last.items() if ".generated." in k}
    hand = {k: v for k, v in last.items() if ".generated." not in k and not k.endswith(".so")}
    def stats(d: dict[str, float]) -> dict[str, float]:
        if not d:
            return {}
        v = sorted(d.values())
        return {"n": len(v), "sum_s": round(sum(v), 1), "min_s": v[0], "median_s": v[len(v) // 2], "max_s": v[-1]}
    return {"generated": stats(gen), "handwritten": stats(hand),
            "slowest": sorted(last.items(), key=lambda kv: -kv[1])[:8],
            "link_s": next((v for k, v in last.items() if k.endswith(".so")), None)}


def launcher_times(path: str) -> dict[str, object]:
    """CPU seconds per TU from the ``/usr/bin/time -f '%e %U %S %M %C'`` launcher log.

    ``cpu_s = user + sys`` is what a TU costs on an idle core, whatever the box's load was; the
    16-core estimate divides the total by 16 and bounds it below by the slowest TU.
    """
    per: dict[str, dict[str, float]] = {}
    with open(path) as f:
        for ln in f:
            parts = ln.split(" ", 4)
            if len(parts) < 5 or not parts[0].replace(".", "").isdigit():
                continue  # "Command exited with non-zero status" and similar
            m = re.search(r" -o (\S+)", parts[4])
            name = os.path.basename(m.group(1)) if m else parts[4][:80]
            per[name] = {"wall_s": float(parts[0]), "cpu_s": round(float(parts[1]) + float(parts[2]), 1),
                         "max_rss_mb": round(int(parts[3]) / 1024)}
    gen = [v["cpu_s"] for k, v in per.items() if ".generated." in k]
    hand = [v["cpu_s"] for k, v in per.items() if ".generated." not in k]
    total = sum(gen) + sum(hand)
    slowest = max((v["cpu_s"] for v in per.values()), default=0.0)
    return {
        "n": len(per), "cpu_s_total": round(total, 1),
        "generated": {"n": len(gen), "cpu_s_total": round(sum(gen), 1),
                      "cpu_s_mean": round(sum(gen) / len(gen), 1) if gen else None},
        "handwritten": {"n": len(hand), "cpu_s_total": round(sum(hand), 1)},
        "estimate_16_cores_s": round(max(total / 16, slowest), 1),
        "max_rss_mb": max((v["max_rss_mb"] for v in per.values()), default=0),
        "per_tu": dict(sorted(per.items(), key=lambda kv: -kv[1]["cpu_s"])),
    }


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    report: dict[str, object] = {
        "path": path,
        "bytes": os.path.getsize(path),
        "needed": needed(path),
        "bind_now": bind_now(path),
        "undefined": undefined_symbols(path),
    }
    report["links_python_or_torch"] = any(re.search(r"python|torch|c10", n) for n in report["needed"])
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        report["ninja_wall_times"] = ninja_times(sys.argv[2])
    if len(sys.argv) > 3 and os.path.exists(sys.argv[3]):
        report["tu_cpu_times"] = launcher_times(sys.argv[3])
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
