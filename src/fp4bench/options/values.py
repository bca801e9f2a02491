"""Option values: text from a command line or a baseline turned into checked values.

The ``parse_*`` functions turn comma-separated text into values and raise ``ValueError`` naming
the bad item (a sweep takes them from an option or from a baseline's recorded sweep); the argparse
types (``percent``, ``alpha``, ``positive_seconds``, ``int_list``, ...) raise
``ArgumentTypeError``, which argparse and pytest print as a one-line usage error naming the option.
Nothing here imports torch: ``--help`` of every front end stays fast.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Callable

from fp4bench.models import MoEModel, get_model, list_models

if TYPE_CHECKING:  # fp4bench.workload.decode imports torch: not before a command has parsed its arguments
    from fp4bench.workload.decode import Routing


#: the rotating-copy rule's defaults (``measure.copies``): placements every cold-L2 case averages
#: at least (``--fp4-min-copies``), most copies a case gets, and the share of the GPU's total
#: memory one case may take with its operand set and all its copies (``measure.holdings``)
MIN_COPIES = 4
MAX_COPIES = 16
MEMORY_FRACTION = 0.40

#: replays with changing inputs every case's output is checked on (``--fp4-replays``,
#: ``measure.replays``): each of two operand sets 8 times
DEFAULT_REPLAYS = 16

KINDS = ("dense", "grouped", "moe", "quant")  # quant: opt-in activation-quantizer rows


def split_list(text: str, what: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; an empty list or an empty item is an error naming ``what``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what}: expected a comma-separated list, got {text!r}")
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise ValueError(f"{what}: empty item in {text!r}")
    return items


def parse_models(text: str, what: str = "models") -> tuple[MoEModel, ...]:
    """"glm-5,deepseek-v3" -> models (aliases allowed, duplicates removed, "all" = every model)."""
    items = split_list(text, what)
    if items == ["all"]:
        return tuple(get_model(n) for n in list_models())
    out: list[MoEModel] = []
    for item in items:
        m = get_model(item)  # ValueError names the unknown model and the known ones
        if m not in out:
            out.append(m)
    return tuple(out)


def parse_ints(text: str, what: str = "batch") -> tuple[int, ...]:
    """"1,16,512" -> (1, 16, 512); every value a positive integer (``what`` names it in errors)."""
    out: list[int] = []
    for item in split_list(text, what):
        try:
            v = int(item)
        except ValueError:
            raise ValueError(f"{what}: {item!r} in {text!r} is not an integer") from None
        if v <= 0:
            raise ValueError(f"{what}: values must be positive, got {v} in {text!r}")
        if v not in out:
            out.append(v)
    return tuple(out)


#: the largest decode batch a sweep or ``fp4bench shapes``/``workload`` takes: its routing draws a
#: batch x experts score matrix (64 MiB at 65536 x 256 experts)
MAX_BATCH = 65536


def parse_batches(text: str, what: str = "batch") -> tuple[int, ...]:
    """Decode batch sizes: ``parse_ints``, each in 1..``MAX_BATCH``."""
    out = parse_ints(text, what)
    big = [b for b in out if b > MAX_BATCH]
    if big:
        raise ValueError(f"{what}: batch sizes must be in 1..{MAX_BATCH}, got {big[0]} in {text!r}")
    return out


def parse_tps(text: str, models: Iterable[MoEModel] = (), what: str = "tp") -> tuple[int, ...]:
    """TP sizes, each checked to divide every given model's intermediate sizes."""
    tps = parse_ints(text, what)
    for m in models:
        for tp in tps:
            m.check_tp(tp)
    return tps


def parse_routings(text: str, what: str = "routing") -> tuple[Routing, ...]:
    """"uniform,zipf:1.2" -> routings."""
    from fp4bench.workload.decode import parse_routing

    out: list[Routing] = []
    for item in split_list(text, what):
        r = parse_routing(item)
        if r not in out:
            out.append(r)
    return tuple(out)


def parse_kinds(text: str, what: str = "kinds") -> tuple[str, ...]:
    """"dense,moe" -> problem kinds, each one of ``KINDS``."""
    kinds = tuple(split_list(text, what))
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"{what}: unknown kind(s) {bad}; use {', '.join(KINDS)}")
    return kinds


def _number(text: str, example: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {example}, got {text!r}") from None


def percent(text: str) -> float:
    """A percentage in [0, 1000), e.g. ``5`` or ``2.5``."""
    v = _number(text, "a percentage like 5 or 2.5")
    if not (0 <= v < 1000):
        raise argparse.ArgumentTypeError(f"percentage must be in [0, 1000), got {v:g}")
    return v


def fraction(text: str) -> float:
    """A relative width in (0, 1), e.g. ``0.005`` (0.5 %)."""
    v = _number(text, "a fraction like 0.005")
    if not (0 < v < 1):
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1 (exclusive), got {v:g}")
    return v


def positive_seconds(text: str) -> float:
    """A duration > 0 seconds."""
    v = _number(text, "seconds like 0.5")
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {v:g}")
    return v


def nonneg_seconds(text: str) -> float:
    """A finite duration >= 0 seconds (0: off)."""
    v = _number(text, "seconds like 2.5")
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {v:g}")
    return v


#: the seeds torch.Generator.manual_seed and numpy take alike
MAX_SEED = 2 ** 63 - 1


def seed(text: str) -> int:
    """An integer seed in 0..``MAX_SEED``."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed must be in 0..2**63-1, got {text if len(text) <= 30 else text[:27] + '...'}")
    return v


def int_in(lo: int, hi: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi`` (its ``bounds``, shown in docs/options.md)."""
    def parse(text: str) -> int:
        short = text if len(text) <= 30 else text[:27] + "..."
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {short!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {short}")
        return v
    parse.bounds = f"{lo}..{hi}"  # type: ignore[attr-defined]
    parse.__name__ = f"int_in_{lo}_{hi}"
    return parse


#: the largest count any numeric option takes (windows, rounds, samples, processes): far above
#: what a run can spend, low enough that a typo (an extra digit, a 5001-digit number) is refused
MAX_COUNT = 100_000


def at_least(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type: an integer in ``minimum..maximum``."""
    return int_in(minimum, maximum)


percent.bounds = "[0, 1000)"  # type: ignore[attr-defined]
fraction.bounds = "(0, 1)"  # type: ignore[attr-defined]
positive_seconds.bounds = "> 0, finite"  # type: ignore[attr-defined]
nonneg_seconds.bounds = ">= 0, finite"  # type: ignore[attr-defined]
seed.bounds = "0..2**63-1"  # type: ignore[attr-defined]


#: a number of rotating operand copies, 1..``MAX_COPIES`` (``measure.copies``)
copy_count = int_in(1, MAX_COPIES, "a whole number of copies")


def env_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as an argparse type."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def int_list(text: str) -> tuple[int, ...]:
    """``parse_ints`` as an argparse type."""
    try:
        return parse_ints(text, "values")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def slowdowns(text: str) -> list[float]:
    """``"0,3,5"`` or ``"0%,3%,5%"`` -> [0.0, 0.03, 0.05]: slowdowns in %, each in (-100, 1000)."""
    out = []
    for part in text.split(","):
        part = part.strip().removesuffix("%")
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated percentages like 0,3,5, got {text!r}") from None
        if not -100 < v < 1000:
            raise argparse.ArgumentTypeError(f"slowdown must be in (-100, 1000) %, got {v:g}")
        out.append(v / 100)
    return out


int_list.bounds = "each >= 1"  # type: ignore[attr-defined]
slowdowns.bounds = "each in (-100, 1000) %"  # type: ignore[attr-defined]
