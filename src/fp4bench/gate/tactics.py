"""Verdicts on tactics and kernels rather than times.

* **lost / new tactic** (``availability_verdicts``): a tactic that worked in the baseline and is
  unsupported now is a FAIL; one that newly works is NEW.
* **kernel change** (``tactic_kernel_change``): an explicit tactic (a library's config index)
  that now runs another kernel. The library re-ordered or replaced its configs, so the two
  timings belong to different kernels and are not compared (INVALID; a FAIL under
  ``Policy(dispatch="fail")``). ``moved_to`` names the index that runs the old kernel now.
* **lost kernel** (``lost_kernel_verdicts``): a kernel an explicit tactic ran in the baseline that
  no tactic of the same backend and problem runs now is a lost tactic (FAIL), whatever index it
  had: the library dropped the config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from fp4bench.gate.baseline import Baseline, is_ok
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import identity
from fp4bench.gate.verdict import KERNEL_CHANGE, LOST_TACTIC, NEW_TACTIC, Status, Verdict

#: the current run as ``compare`` takes it: ``{fullname: (windows or samples, extra_info)}``
Current = Mapping[str, tuple[Sequence[float], Mapping[str, Any] | None]]


def tactic_kernel_change(common: dict[str, Any], base_extra: Mapping[str, Any], new_extra: Mapping[str, Any],
                         kinds: tuple[tuple[str, ...], tuple[str, ...]], policy: Policy) -> Verdict:
    """The kernel-change verdict of an explicit tactic; ``common``: the timing verdict's fields
    (its Δ and interval are left out), ``kinds``: (added, removed) kernel names."""
    tactic = new_extra.get("tactic", "?")
    reason = (f"tactic {tactic} now runs another kernel: {identity(base_extra)} → {identity(new_extra)}; "
              "timings of different kernels are not compared")
    status = Status.FAIL if policy.dispatch == "fail" else Status.INVALID
    kept = {k: v for k, v in common.items() if k not in ("ratio", "interval")}  # no Δ
    return Verdict(status=status, kind=KERNEL_CHANGE, reason=reason, dispatch_changed=True,
                   kernels_added=kinds[0], kernels_removed=kinds[1], **kept)


def lost_kernel_verdicts(baseline: Baseline, current: Current) -> list[Verdict]:
    """The lost-kernel FAILs. Where another index runs the kernel now, the re-ordering is named on
    the kernel-change line of the old index (``moved_to``). Only for backends and problems
    measured in both runs."""
    now: dict[tuple[Any, Any], dict[str, str]] = {}
    for _, (_, extra) in current.items():
        extra = extra or {}
        if extra.get("kernels"):
            now.setdefault((extra.get("backend"), extra.get("problem")), {})[identity(extra)] = extra.get("tactic")
    out = []
    for name, rec in baseline.benchmarks.items():
        x = rec.extra_info
        group = now.get((x.get("backend"), x.get("problem")))
        if not x.get("explicit_tactic") or not x.get("kernels") or group is None:
            continue
        if identity(x) not in group:
            out.append(Verdict(name=name, status=Status.FAIL, kind=LOST_TACTIC, reason=(
                f"tactic {x.get('tactic')} ran {identity(x)} in the baseline; no tactic of {x.get('backend')} "
                f"runs it now")))
    return out


def moved_to(v: Verdict, base_extra: Mapping[str, Any], current: Current) -> Verdict:
    """Name the index that runs the baseline's kernel now (a re-ordered list)."""
    old = identity(base_extra)
    for _, (_, extra) in current.items():
        extra = extra or {}
        if (extra.get("backend"), extra.get("problem")) == (base_extra.get("backend"), base_extra.get("problem")) \
                and extra.get("kernels") and identity(extra) == old:
            return replace(v, reason=f"{v.reason}; its baseline kernel now runs as tactic {extra.get('tactic')}")
    return v


def availability_verdicts(before: Mapping[str, str], now: Mapping[str, str]) -> list[Verdict]:
    """Lost and new tactics of the availability maps. Entries absent now are left to the MISSING
    verdict of their benchmark (a narrower sweep is not a lost tactic)."""
    out = []
    for key in sorted(set(before) & set(now)):
        was, is_ = is_ok(before[key]), is_ok(now[key])
        if was and not is_:
            reason = f"ok in the baseline, now {now[key]}"
            out.append(Verdict(name=key, status=Status.FAIL, kind=LOST_TACTIC, reason=reason))
        elif is_ and not was:
            reason = f"now ok (baseline: {before[key]})"
            out.append(Verdict(name=key, status=Status.NEW, kind=NEW_TACTIC, improved=True, reason=reason))
    return out
