"""Options shared by the pytest plugin and the command line: one definition, two spellings.

A setting both front ends take is defined once here (type, default, help) and added to pytest
with the prefix ``fp4-`` and to a command's argparse parser without it: ``--fp4-floor`` and
``fp4bench compare --floor`` are one option. The ``parse_*`` functions turn comma-separated text
into values and raise ``ValueError`` that names the bad item; the argparse types (``percent``,
``alpha``, ``positive_seconds``, ``int_list``) raise ``ArgumentTypeError`` for a one-line usage error.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from fp4bench.models import MoEModel, get_model, list_models

if TYPE_CHECKING:  # fp4bench.workload.decode imports torch: not before a command has parsed its arguments
    from fp4bench.workload.decode import Routing

#: the rotating-copy rule's defaults (``measure.copies``): placements every cold-L2 case averages
#: at least (``--fp4-min-copies``), most copies a case gets, and the share of the GPU's total
#: memory all copies of one case may take
MIN_COPIES = 4
MAX_COPIES = 16
MEMORY_FRACTION = 0.40

KINDS = ("dense", "grouped", "moe", "quant")  # quant: opt-in activation-quantizer rows

# --------------------------------------------------------------------------------------------
# values


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


# --------------------------------------------------------------------------------------------
# argparse types


def plain(doc: str) -> str:
    """A docstring as terminal help text: RST ``literal`` markup becomes the bare literal."""
    return doc.replace("``", "")


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


def alpha(text: str) -> float:
    """A significance level in (0, 1)."""
    v = _number(text, "a significance level like 0.05")
    if not (0 < v < 1):
        raise argparse.ArgumentTypeError(f"alpha must be between 0 and 1 (exclusive), got {v:g}")
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


def int_in(lo: int, hi: int | None = None, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: an integer in ``lo..hi`` (no upper bound when ``hi`` is None)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}" if hi is None else f"must be in {lo}..{hi}, got {v}")
        return v
    return parse


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""
    return int_in(minimum)


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


# --------------------------------------------------------------------------------------------
# definitions


@dataclass(frozen=True)
class Option:
    """One option both front ends take: ``--fp4-<name>`` in pytest, ``--<name>`` on the command line."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    action: str | None = None
    choices: tuple[str, ...] | None = None

    def add(self, add_argument: Callable[..., Any], prefix: str = "") -> None:
        """``add_argument`` is argparse's ``add_argument`` or a pytest option group's ``addoption``."""
        kwargs = {k: v for k, v in (("type", self.type), ("action", self.action), ("choices", self.choices))
                  if v is not None}
        add_argument(f"--{prefix}{self.name}", default=self.default, help=self.help, **kwargs)


def add_options(add_argument: Callable[..., Any], options: Iterable[Option], prefix: str = "") -> None:
    for o in options:
        o.add(add_argument, prefix)


#: what to measure; ``None`` defaults mean "not given": a gated pytest run takes the baseline's
#: value then (``sweep.sweep_options``), else the default named in the help
SWEEP = (
    Option("models", "comma-separated models, or all (default glm-5)"),
    Option("batches", "decode batch sizes (default 1,64,512 on a GPU, 1,16 on a CPU)"),
    Option("tp", "tensor-parallel sizes (default 1)"),
    Option("routing", "routings: uniform, zipf:<s> (comma-separated; default uniform)"),
    Option("kinds", "problem kinds to run (default dense,grouped,moe; add quant for the activation quantizers)"),
    Option("backends", "comma-separated backend names (default: all)"),
    Option("full", "every tactic and the dense M sweep 1..16384", action="store_true"),
    Option("tactics", "default: one tactic per backend (quick); all: every tile config / tactic",
           choices=("default", "all")),
    Option("seed", "seed of the operands and the routing (default %(default)d)", type=seed, default=0),
    Option("device", "torch device (default cuda:0 if present, else cpu)"),
    Option("plugin", "import a module defining BACKENDS (repeatable)", action="append", default=[]),
    Option("l2", "L2 state while timing (default cold)", choices=("cold", "hot"), default="cold"),
    Option("min-copies", "cold L2 on a GPU: every case rotates over at least this many operand copies, each "
           f"its own allocation, so its time averages over buffer placements (within {MEMORY_FRACTION * 100:.0f}%% of "
           "the GPU's total memory; recorded with the run; default %(default)d)", type=copy_count,
           default=MIN_COPIES),
)

#: how the gate decides; the defaults are ``gate.policy.Policy``'s (tests/test_options.py checks)
GATE = (
    Option("floor", "smallest slowdown that must fail, in %% (default %(default)g)", type=percent, default=5.0),
    Option("drift", "deprecated, no longer applied: the spread between windows comes from the windows (default: unset)",
           type=percent, default=None),
    Option("alpha", "deprecated, no longer applied: the rule's bounds are gate.rule.RuleSettings.confidence (default: unset)",
           type=alpha, default=None),
    Option("allow-missing", "benchmarks of the baseline that were not measured do not fail the gate",
           action="store_true"),
    Option("allow-ambiguous", "INVALID verdicts and too-few-samples benchmarks do not fail the gate "
           "(they do by default)", action="store_true"),
    Option("fail-on-ambiguous", "every AMBIGUOUS verdict fails the gate too", action="store_true"),
)
FLOOR_DRIFT_ALPHA = GATE[:3]

#: the rest of ``gate.policy.Policy`` that ``fp4bench compare`` takes (defaults checked against it in
#: tests/test_options.py; defined here so that ``--help`` needs no numpy/scipy)
DISPATCH_POLICIES = ("report", "fail")
COMPARE = (
    Option("noise-k", "deprecated, no longer applied: noise widens each benchmark's interval (default %(default)g)", type=float,
           default=2.0),
    Option("min-samples", "fewer samples on either side => AMBIGUOUS (default %(default)d)", type=int, default=5),
    Option("dispatch", "kernel-set change: report it or fail (default %(default)s)", choices=DISPATCH_POLICIES,
           default="report"),
)

BASELINES = Option("baselines", "baseline root folder (default %(default)s)", default="baselines")

#: the GPUs of the host a command spreads over (``fp4bench.gpus.select``): the syntax, then each
#: command's option with its own default
GPUS_SYNTAX = ("all, or comma-separated GPU indices (positions among the visible GPUs, as CUDA numbers them) "
               "or GPU UUIDs (a unique prefix is enough)")
AB_GPUS = Option("gpus", f"GPUs to spread the benchmarks over: {GPUS_SYNTAX}; each benchmark runs on one of "
                 "them, its A and B workers pinned to that GPU by UUID (default: one GPU, the one --device "
                 "names, as without this option)")

#: ``fp4bench units``: what every unit measures (the sweep options with the check's own defaults:
#: memory-bound and compute-bound rows of the default model) and how
UNITS_SWEEP = tuple(
    {"batches": Option("batches", "decode batch sizes (default %(default)s: batch 1 and 64 memory-bound, the dense "
                                  "rows of 512 compute-bound on an H200)", default="1,64,512"),
     "kinds": Option("kinds", "problem kinds (default %(default)s)", default="dense,grouped"),
     "backends": Option("backends", "comma-separated backend names (default %(default)s)",
                        default="torch-bf16,torch-fp8")}.get(o.name, o) for o in SWEEP)
UNITS = (
    Option("gpus", f"GPUs to compare: {GPUS_SYNTAX} (default %(default)s)", default="all"),
    Option("python", "interpreter or venv whose stack every unit runs (default: the one running fp4bench)"),
    Option("windows", "independent windows per benchmark and unit, each in fresh device memory with its own "
           "capture (default %(default)d)", type=at_least(2), default=3),
    Option("max-windows", "windows a benchmark still undecided for some unit may grow to (default %(default)d)",
           type=at_least(2), default=6),
    Option("window-samples", "timed samples per window (default %(default)d)", type=at_least(3), default=10),
    Option("time-budget", "seconds for the whole check: further windows are taken only within it (default "
           "%(default)g)", type=positive_seconds, default=600.0),
    Option("case-timeout", "seconds before a request is a hang (default %(default)g)", type=positive_seconds,
           default=900.0),
    Option("floor", "smallest slowdown of a unit against its siblings that must fail, in %% (default %(default)g: "
           "its guard band, half of it, stays above 4.2 %%, the largest offset of one kernel measured between H200 "
           "machines)", type=percent, default=10.0),
    Option("fail-on-ambiguous", "a unit with an AMBIGUOUS benchmark is flagged too", action="store_true"),
    Option("env", "KEY=VALUE: an environment variable every worker gets (repeatable; default: none)", type=env_pair,
           action="append", default=[]),
    Option("json", "write the verdicts as JSON here (checked before the run; default: not written)"),
    Option("force", "overwrite an existing --json file", action="store_true"),
)

#: the deployed stack of a runner (``fp4bench stack``): the venv it serves with and the file that pins it
STACK = (
    Option("python", "the venv (directory) or interpreter whose packages are frozen or checked "
           "(default: the one running fp4bench)"),
    Option("runner", "runner name: the stack file is <stack-dir>/<runner>.txt (no default: required unless --file)"),
    Option("file", "the stack file itself (default: <stack-dir>/<runner>.txt)"),
    Option("stack-dir", "folder of the committed stack files (default %(default)s)", default="stack"),
    Option("check", "compare the venv with the stack file instead of writing it (exit 1 when they differ)",
           action="store_true"),
)


#: gate options that are still parsed but no longer change a verdict, and why
DEPRECATED = {
    "drift": "the gate judges window medians, whose spread it estimates from the windows themselves",
    "alpha": "the sample-level test it set is gone; the rule's bounds are one-sided at RuleSettings.confidence",
}


def policy_kwargs(given: Callable[[str], Any]) -> dict[str, Any]:
    """``gate.policy.Policy`` keyword arguments from the ``GATE`` options (percent -> fraction).
    ``given(name)`` returns an option's value; options a front end does not take are left out."""
    out: dict[str, Any] = {}
    for o in GATE:
        v = given(o.name)
        if v is None:
            continue
        if o.name in DEPRECATED:
            from fp4bench.options.deprecated import warn_once

            warn_once(o.name, f"fp4bench: --{o.name} no longer applies: {DEPRECATED[o.name]}")
            continue
        key = o.name.replace("-", "_")
        out[key] = v / 100.0 if o.type is percent else v
    return out
