"""Every option of every fp4bench front end, defined once: the pytest plugin (``--fp4-<name>``)
and each ``fp4bench`` command (``--<name>``) add theirs from here (``options.adapters``), and
docs/options.md is generated from here (``python -m fp4bench.options.doc``).

One name has one meaning: ``--min-samples`` is the fewest samples a case is timed for, the
verdict's threshold is ``--verdict-min-samples``; ``--same-unit`` refuses a baseline of another
GPU, ``power --assume-same-unit`` assumes the same GPU; ``--baseline-file`` is a file,
``--baselines`` the folder of approved baselines; ``--time-budget`` is a case's sampling time,
``--run-budget`` a whole run's; the verdict JSON is ``--verdict-json`` everywhere. Each option has
one spelling per front end (no aliases; parsers never take abbreviations) and every numeric option
documented bounds (its type, ``options.values``).

Defaults that another module owns are written here as numbers, so that ``--help`` imports
nothing heavy, and checked against their owner in tests/options/test_options.py (``gate.policy.Policy``,
``ab.defaults.AbDefaults``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fp4bench.options.option import COMMANDS, FRONT_ENDS, PYTEST, Option
from fp4bench.options.values import (DEFAULT_REPLAYS, MEMORY_FRACTION, MIN_COPIES, at_least, copy_count, env_pair,
                                     fraction, int_in, int_list, nonneg_seconds, percent, positive_seconds, seed,
                                     slowdowns)

__all__ = ["COMMANDS", "FRONT_ENDS", "OPTIONS", "PYTEST", "Option", "option", "options_of", "policy_kwargs"]

SWEEPS = (PYTEST, "ab", "units", "calibrate")  # the front ends that run a sweep
GATES = (PYTEST, "compare", "ab")  # the front ends that judge with the gate's Policy
AB = (PYTEST, "ab")  # the A/B upgrade gate: fp4bench ab, or pytest --fp4-ab-against
WITH_AB = "with --fp4-ab-against: "
DECODE = ("workload", "shapes")  # decode arithmetic: the sweep's models, batches, TP (and routing)
GPUS_SYNTAX = ("all, or comma-separated GPU indices (positions among the visible GPUs, as CUDA numbers them) "
               "or GPU UUIDs (a unique prefix is enough)")
#: the GPU names ``measure.peaks.gpu_by_name`` knows (tests/options/test_options.py checks)
KNOWN_GPUS = "h100, h200, b200, gb200, b300, gb300, rtx-pro-6000, rtx-5090"
DISPATCH_POLICIES = ("report", "fail")
#: most independent windows per case: each is a fresh capture over the whole sweep
MAX_WINDOWS = 100
#: the largest GEMM dimension ``fidelity`` takes
MAX_DIM = 1 << 20

OPTIONS: tuple[Option, ...] = (
    # --- what to measure; None defaults mean "not given": a gated pytest run takes the
    # --- baseline's value then (``run.sweep.sweep_options``), else the default named in the help
    Option("models", "comma-separated models, or all (default glm-5)", (*SWEEPS, *DECODE),
           per_front={f: {"default": "glm-5"} for f in DECODE}),
    Option("batches", "decode batch sizes (default 1,64,512 on a GPU, 1,16 on a CPU)", (*SWEEPS, *DECODE),
           per_front={"units": {"default": "1,64,512", "help": "decode batch sizes (default %(default)s: batch 1 and "
                                "64 memory-bound, the dense rows of 512 compute-bound on an H200)"},
                      "workload": {"default": "512,1024", "help": "decode batch sizes, comma-separated (default %(default)s)"},
                      "shapes": {"default": "512", "help": "decode batch sizes, comma-separated (default %(default)s)"}}),
    Option("tp", "tensor-parallel sizes, comma-separated (default 1)", (*SWEEPS, *DECODE),
           per_front={f: {"default": "1"} for f in DECODE}),
    Option("routing", "routings: uniform, zipf:<s> (comma-separated; default uniform)", (*SWEEPS, "shapes"),
           per_front={"shapes": {"default": "uniform"}}),
    Option("kinds", "problem kinds to run (default dense,grouped,moe; add quant for the activation quantizers)", SWEEPS,
           per_front={"units": {"default": "dense,grouped", "help": "problem kinds (default %(default)s)"}}),
    Option("backends", "comma-separated backend names (default: all)", (*SWEEPS, "prepare"),
           per_front={"units": {"default": "torch-bf16,torch-fp8",
                                "help": "comma-separated backend names (default %(default)s)"},
                      "prepare": {"help": "only the modules of these backends (comma-separated; default: every "
                                          "FlashInfer backend)"}}),
    Option("full", "every tactic and the dense M sweep 1..16384", SWEEPS, action="store_true"),
    Option("tactics", "default: one tactic per backend (quick); all: every tile config / tactic", SWEEPS,
           choices=("default", "all")),
    Option("seed", "seed of the operands and the routing (default %(default)d)", SWEEPS, type=seed, default=0),
    Option("device", "torch device (default cuda:0 if present, else cpu)", (*SWEEPS, "env", "fidelity", "prepare"),
           per_front={"fidelity": {"default": "cuda:0", "help": "CUDA device (default %(default)s)"},
                      "prepare": {"default": "cuda:0", "help": "CUDA device to build for (default %(default)s)"}}),
    Option("plugin", "import a module defining BACKENDS (repeatable)", (*SWEEPS, "env"), action="append", default=[]),
    Option("l2", "L2 state while timing (default cold)", SWEEPS, choices=("cold", "hot"), default="cold"),
    Option("min-copies", "cold L2 on a GPU: every case rotates over at least this many operand copies, each "
           f"its own allocation, so its time averages over buffer placements (while the case with its operands and "
           f"copies fits in {MEMORY_FRACTION * 100:.0f}%% of the GPU's total memory; recorded with the run; default "
           f"{MIN_COPIES}); every copy is checked once "
           "(copy mismatch); on a CPU, given, it makes that many copies too (default one there)", SWEEPS,
           type=copy_count),
    # --- how one case is timed (pytest)
    Option("time-budget", "seconds of sampling per case (default 1 on a GPU, 0.3 on a CPU)", (PYTEST,),
           type=positive_seconds),
    Option("target-ci", "stop sampling once the 95%% CI of the median is this narrow, relative (default %(default)g)",
           (PYTEST,), type=fraction, default=0.005),
    Option("min-samples", "fewest samples the timer takes per case (default %(default)d)", (PYTEST,), type=at_least(1),
           default=10),
    Option("replays", "after timing, replay each case this many times with its inputs alternating between two "
           "operand sets and check every output (replay mismatch; fewer for a call too long for 5%% of the time "
           "budget, at least 4); 0: off (default %(default)d)", (PYTEST,), type=at_least(0), default=DEFAULT_REPLAYS),
    Option("energy-window", "seconds of extra replay per case to measure joules per GEMM via NVML (default "
           "%(default)g: off)", (PYTEST,), type=nonneg_seconds, default=0.0),
    # --- baselines
    Option("baselines", "baseline root folder (default %(default)s)", (PYTEST, "baseline approve", "calibrate"),
           default="baselines",
           per_front={"calibrate": {"help": "baseline root folder: the file goes to <root>/<gpu>/units/<UUID>"
                                            ".calibration.json (default %(default)s)"}}),
    Option("baseline-file", "a baseline file to gate against (default: with --benchmark-compare, "
           "baselines/<gpu>/approved.json)", (PYTEST, "report"),
           per_front={"report": {"help": "a baseline file: adds the verdict and the Δ%% plot (default: none)"}}),
    Option("save-baseline", "write this run as a candidate baseline (default path "
           "baselines/<gpu>/candidates/<UTC>.json)", (PYTEST,), nargs="?", const="auto"),
    Option("same-unit", "refuse a baseline recorded on another physical GPU (driver-upgrade sequence)", (PYTEST,),
           action="store_true", default=False),
    Option("assume-same-unit", "A and B come from one GPU though their fingerprints lack a UUID: judge them as one "
           "unit (no unit-to-unit offset in the error term)", ("power",), action="store_true", default=False),
    # --- how the gate decides; the defaults are gate.policy.Policy's (tests/options/test_options.py checks)
    Option("floor", "smallest slowdown that must fail, in %% (default %(default)g)",
           (*GATES, "power", "units", "bisect", "baseline approve", "calibrate"), type=percent, default=5.0,
           per_front={"ab": {"default": 3.0},  # two stacks side by side resolve less than runs minutes apart
                      "bisect": {"default": 3.0, "help": "smallest slowdown a step of fp4bench ab must show to be "
                                 "slower, in %% (default %(default)g, ab's)"},
                      "baseline approve": {"help": "largest cumulative slowdown against the anchor approval a "
                                           "candidate may carry, in %% (default %(default)g, the gate's floor)"},
                      "units": {"default": 10.0, "help": "smallest slowdown of a unit against its siblings that "
                                "must fail, in %% (default %(default)g: its guard band, half of it, stays above "
                                "4.2 %%, the largest offset of one kernel measured between H200 machines)"}}),
    Option("allow-missing", "benchmarks of the baseline that were not measured do not fail the gate", GATES,
           action="store_true"),
    Option("allow-ambiguous", "INVALID verdicts and too-few-samples benchmarks do not fail the gate (they do by "
           "default)", GATES, action="store_true"),
    Option("fail-on-ambiguous", "every AMBIGUOUS verdict fails the gate too", (*GATES, "units"), action="store_true",
           per_front={"units": {"help": "a unit with an AMBIGUOUS benchmark is flagged too"}}),
    Option("verdict-min-samples", "fewer samples on either side => AMBIGUOUS (default %(default)d)", ("compare",),
           type=at_least(2), default=5),
    Option("dispatch", "kernel-set change: report it or fail (default %(default)s)", ("compare",),
           choices=DISPATCH_POLICIES, default="report"),
    # --- independent windows
    Option("no-confirm", "judge the first window only (no further window for an undecided benchmark)", (PYTEST,),
           action="store_true", default=False),
    Option("windows", "independent windows per case, taken in interleaved passes over the sweep (default 3 with "
           "--fp4-save-baseline, else 1)", (PYTEST, "units", "calibrate"), type=int_in(1, MAX_WINDOWS),
           per_front={"units": {"type": int_in(2, MAX_WINDOWS), "default": 3, "help": "independent windows per "
                                "benchmark and unit, each in fresh device memory with its own capture (default "
                                "%(default)d)"},
                      "calibrate": {"type": int_in(3, MAX_WINDOWS), "default": 4, "help": "passes per process: 2 in "
                                    "one placement, the rest each in a fresh placement set (default %(default)d)"}}),
    Option("max-windows", "most windows an undecided benchmark takes in its test (default %(default)s)",
           (PYTEST, "units"), type=int_in(1, MAX_WINDOWS), default=6,
           per_front={"units": {"type": int_in(2, MAX_WINDOWS), "default": 6, "help": "windows a benchmark still undecided for "
                                "some unit may grow to (default %(default)d)"}}),
    Option("window-samples", "timed samples per window (default %(default)d)", ("units", "calibrate"),
           type=at_least(3), default=10),
    Option("processes", "worker processes, one after the other, each its own CUDA context and placements "
           "(default %(default)d)", ("calibrate",), type=at_least(2), default=3),
    Option("per-class", "benchmarks of each class (dense, grouped, moe) to measure (default %(default)d)",
           ("calibrate",), type=at_least(1), default=4),
    Option("window-budget", "seconds a run may spend on windows undecided benchmarks ask for (default %(default)s)",
           (PYTEST,), type=nonneg_seconds, default=120.0),
    # --- worker processes
    Option("isolate", "run each case in a worker process: a crash, hang or poisoned CUDA context costs one case",
           (PYTEST,), action="store_true", default=False),
    Option("case-timeout", "seconds before a worker's request is a hang (default %(default)g)",
           (PYTEST, "ab", "units", "calibrate"),
           type=positive_seconds, default=900.0,
           per_front={PYTEST: {"help": "with --fp4-isolate: seconds a case may take (JIT build included) before it "
                                       "is a hang (default %(default)g)"}}),
    Option("python", "the interpreter or venv to use (default: the one running fp4bench)",
           (PYTEST, "units", "stack freeze", "bisect", "calibrate"),
           per_front={PYTEST: {"help": "with --fp4-isolate: the worker's interpreter or venv (default: this one)"},
                      "units": {"help": "interpreter or venv whose stack every unit runs (default: the one running "
                                        "fp4bench)"},
                      "stack freeze": {"help": "the venv (directory) or interpreter whose packages are frozen or "
                                               "checked (default: the one running fp4bench)"},
                      "bisect": {"help": "the base environment (venv or interpreter) each release's venv shares its "
                                         "packages with, torch included (default: the one running fp4bench)"}}),
    # --- the A/B upgrade gate
    Option("ab-against", "judge this environment (B, the candidate) against another one (A, the current stack: a "
           "python or a venv) on this GPU, interleaved; the selected cases become one A/B test. Write it as "
           "--fp4-ab-against=PATH: pytest picks its rootdir from path-like arguments (default: no A/B)", (PYTEST,),
           metavar="PYTHON_OR_VENV"),
    Option("a", "current stack: python interpreter or venv directory", ("ab",), required=True),
    Option("b", "candidate stack: python interpreter or venv directory", ("ab",), required=True),
    Option("a-env", "environment variable only side A gets (repeatable)", AB, type=env_pair, action="append",
           default=[], metavar="KEY=VALUE",
           per_front={PYTEST: {"help": WITH_AB + "an environment variable for side A's workers only (repeatable)"}}),
    Option("b-env", "environment variable only side B gets (repeatable)", ("ab",), type=env_pair, action="append",
           default=[], metavar="KEY=VALUE"),
    Option("a-plugin", "backend module only side A loads (repeatable; --plugin loads one on both sides)", ("ab",),
           action="append", default=[], metavar="MODULE"),
    Option("b-plugin", "backend module only side B loads, e.g. fp4bench.testing.slowdown with --b-env "
           "FP4BENCH_SLOWDOWN=torch-bf16=0.05 to test the gate", ("ab",), action="append", default=[],
           metavar="MODULE"),
    Option("replicates", "worker processes per side, each an independent replicate (default %(default)d)", AB,
           type=at_least(2), default=6, per_front={PYTEST: {"help": WITH_AB + "worker processes per side, each an "
                                                                     "independent replicate (default %(default)d)"}}),
    Option("rounds", "timing rounds every benchmark gets, each visiting every process (default %(default)d)", AB,
           type=at_least(2), default=6, per_front={PYTEST: {"help": WITH_AB + "timing rounds every benchmark gets, "
                                                                     "each visiting every process (default %(default)d)"}}),
    Option("max-rounds", "rounds an undecided benchmark may grow to (default %(default)d)", ("ab",), type=at_least(2),
           default=40),
    Option("max-resident", "at most this many processes hold one benchmark at once; beyond it the process pairs take "
           "turns (default: as many as the GPU's free memory holds, read at the first capture)", AB, type=at_least(2),
           per_front={PYTEST: {"help": WITH_AB + "at most this many processes hold one benchmark at once; beyond it "
                                      "the process pairs take turns (default: as many as the GPU's free memory holds)"}}),
    Option("placement", "process: one placement set per process and benchmark (each capture already rotates over "
           "--min-copies operand copies, each its own allocation); round: also every round after a process's first in "
           "fresh device memory, ~0.3-0.7 s more a round and process (default %(default)s)", ("ab",),
           choices=("round", "process"), default="process"),
    Option("round-samples", "samples per process and round, at most: a benchmark whose replay is longer than 0.25 s / "
           "this takes fewer, at least 3, the same on both sides (default %(default)d)", AB, type=at_least(3),
           default=10, per_front={PYTEST: {"help": WITH_AB + "samples per process and round, at most (default "
                                                   "%(default)d)"}}),
    Option("round-timing", "what a sample of a round times: span: the graph replay's event span per call, profiler "
           "kept out of the rounds (default); cupti: kernel busy time, every round profiled (slower)", ("ab",),
           choices=("span", "cupti"), default="span"),
    Option("run-budget", "seconds for the whole run: undecided benchmarks get further rounds or windows only while "
           "the run fits in it (default %(default)g)", (PYTEST, "ab", "units", "calibrate"), type=positive_seconds,
           default=600.0,
           per_front={PYTEST: {"help": WITH_AB + "seconds for the whole A/B run; undecided benchmarks get more rounds "
                                      "only while it fits (default %(default)g)", "default": 1800.0},
                      "ab": {"default": 1800.0},
                      "calibrate": {"default": 300.0, "help": "seconds for the calibration: no further pass or "
                                    "process starts after it (at least 3 passes in 2 processes; default %(default)g)"}}),
    Option("benchmark-budget", "seconds of added measurement one benchmark may take (default %(default)g)", ("ab",),
           type=positive_seconds, default=120.0),
    # --- the GPUs of the host a command spreads over (fp4bench.gpus.select)
    Option("gpus", f"GPUs of this host to run on: {GPUS_SYNTAX}", ("ab", "units"),
           per_front={"ab": {"help": f"GPUs to spread the benchmarks over: {GPUS_SYNTAX}; each benchmark runs on one "
                                     "of them, its A and B workers pinned to that GPU by UUID (default: one GPU, the "
                                     "one --device names, as without this option)"},
                      "units": {"default": "all", "help": f"GPUs to compare: {GPUS_SYNTAX} (default %(default)s)"}}),
    Option("env", "KEY=VALUE: an environment variable every worker gets (repeatable; default: none)", ("units",),
           type=env_pair, action="append", default=[]),
    # --- what a front end writes
    Option("log", "write every finished case to this JSON-lines file as it finishes (default with "
           "--fp4-save-baseline: next to the JSON, *.lines.jsonl); an existing file is refused unless --fp4-force",
           (PYTEST,)),
    Option("verdict-json", "write the verdict as JSON here (checked before the run; default: not written)",
           (PYTEST, "compare", "ab", "units"), metavar="PATH",
           per_front={"compare": {"help": "also write the verdict as JSON ('-': print it instead of the table; "
                                          "default: not written)"}}),
    Option("markdown", "also write a markdown verdict, FAIL/MISSING first ('-': print it instead of the table); with "
           "$GITHUB_STEP_SUMMARY set it is appended there in any case; default: not written", ("compare",),
           metavar="PATH"),
    Option("csv", "write one CSV line per measured case (default: not written)", (PYTEST,), metavar="PATH"),
    Option("rows-json", "write the rows to this file (checked before the run; default: not written)", ("fidelity",),
           type=Path),
    Option("out", "where the command writes (default: see the command)", ("baseline migrate", "report"),
           per_front={"baseline migrate": {"help": "the slim file to write ('-': print it); never FILE itself and "
                                                   "never a baseline: 'baseline approve' makes it one",
                                           "required": True},
                      "report": {"help": "output folder (created; its parent must exist)", "required": True}}),
    Option("force", "do what a safety check refuses: replace an existing output file (never one the command reads)",
           (PYTEST, "compare", "fidelity", "ab", "units", "report", "baseline approve", "baseline migrate", "history",
            "calibrate"),
           action="store_true", default=False,
           per_front={PYTEST: {"help": "let --fp4-verdict-json, --fp4-csv and --fp4-log replace existing files "
                                       "(never a file this run reads)"},
                      "compare": {"help": "overwrite an existing --verdict-json / --markdown file (never one of the "
                                          "files compared)"},
                      "fidelity": {"help": "overwrite an existing --rows-json file"},
                      "ab": {"help": "overwrite an existing --verdict-json file"},
                      "units": {"help": "overwrite an existing --verdict-json file"},
                      "report": {"help": "overwrite a report.md already in --out"},
                      "baseline approve": {"help": "approve even a run with failures/regressions, fewer benchmarks "
                                                   "than the approved baseline, or another L2 mode/timer (never a "
                                                   "run of test-only backends)"},
                      "baseline migrate": {"help": "overwrite an existing --out file"},
                      "history": {"help": "overwrite an existing --plot file"}}),
    Option("title", "report title (default: fp4bench report)", ("report",)),
    Option("progress", "print 'N/M cases, elapsed, ETA' at most every SECONDS (default 30; 0: never)", (PYTEST,),
           type=nonneg_seconds, default=30.0, metavar="SECONDS"),
    Option("benchmark-table", "also list fp4bench's cases in pytest-benchmark's own table (left out by default: "
           "fp4bench prints its own results table of the same samples)", (PYTEST,), action="store_true",
           default=False),
    # --- one command's own
    Option("slowdowns", "slowdowns to apply to B, in %%, comma-separated (default %(default)s)", ("power",),
           type=slowdowns, default="0,3,4,5,6"),
    Option("ms", "GEMM M values (default %(default)s)", ("fidelity",), type=int_list,
           default="1,16,64,256,1024,4096,16384"),
    Option("n", "GEMM N (default: GLM-5 gate_up, 2 x 2048)", ("fidelity",), type=int_in(1, MAX_DIM), default=4096),
    Option("k", "GEMM K (default: GLM-5 hidden size)", ("fidelity",), type=int_in(1, MAX_DIM), default=6144),
    Option("budget", "seconds per timed / interleaved window (default %(default)g)", ("fidelity",),
           type=positive_seconds, default=1.0),
    Option("tolerance", "allowed |graph/eager - 1|, in %% (default %(default)g)", ("fidelity",), type=percent,
           default=2.0),
    Option("format", "operand format (default: the model's FP4 format)", ("shapes",)),
    Option("gpu", f"GPU for the ridge point: {KNOWN_GPUS}, or the name nvidia-smi shows (default: the detected GPU; "
           "none detected: no ridge point)", ("shapes",)),
    Option("runner", "runner name: the stack file is <stack-dir>/<runner>.txt (no default: required unless --file)",
           ("stack freeze",)),
    Option("file", "the stack file itself (default: <stack-dir>/<runner>.txt)", ("stack freeze",)),
    Option("stack-dir", "folder of the committed stack files (default %(default)s)", ("stack freeze",),
           default="stack"),
    # --- bisect: which release made the failing benchmarks slower
    Option("only", "benchmark ids to run, comma-separated, as the verdict and the report name them (default: "
           "every benchmark of the sweep)", ("ab", "bisect"),
           per_front={"bisect": {"help": "the failing benchmark ids, comma-separated; each step's ab runs only "
                                         "these (default: --failed's)"}}),
    Option("failed", "a verdict JSON (fp4bench ab / compare / pytest --fp4-verdict-json): its FAIL benchmarks are "
           "the ones bisected (default: --only)", ("bisect",), metavar="VERDICT_JSON"),
    Option("wheels", "a local folder of the package's wheels/sdists: releases listed and installed from it, "
           "offline (default: the index)", ("bisect",), metavar="DIR"),
    Option("index", "the index's JSON API the releases are listed from (default %(default)s)", ("bisect",),
           default="https://pypi.org/pypi", metavar="URL"),
    Option("stack", "a stack file (fp4bench stack freeze): the pins of the rest of the stack when GOOD and BAD "
           "are versions (default: the base environment as it is)", ("bisect",), metavar="FILE"),
    Option("cache", "folder of the cached venvs, one per release, and of the state file (default %(default)s)",
           ("bisect",), default=".fp4bench-bisect", metavar="DIR"),
    Option("state", "the state file: what was measured, so a rerun resumes (default: "
           "<cache>/<package>-<good>-<bad>.json)", ("bisect",), metavar="FILE"),
    Option("ab-args", "more fp4bench ab options for each step, as one string: the sweep options of the failing "
           "run (benchmark ids depend on them), e.g. '--models glm-5 --batches 1' (default: none)", ("bisect",),
           default=""),
    Option("pip-args", "more pip install options for each release's venv, as one string (e.g. '--extra-index-url "
           "URL'; default: none)", ("bisect",), default=""),
    Option("no-prepare", "skip the release's fp4bench prepare step (a package without FlashInfer JIT modules)",
           ("bisect",), action="store_true", default=False),
    Option("module", "the module the package is imported as (default: flashinfer for flashinfer-python, else the "
           "name with _ for -)", ("bisect",)),
    # --- the approved baselines' history and cumulative drift
    Option("anchor", "the approval cumulative drift is measured from: a git revision of the approved baseline "
           "(default: the first approval of this GPU model and unit with the same measurement keys, or the last "
           "one that accepted drift)", ("baseline approve",), metavar="REV"),
    Option("accept-drift", "approve although the cumulative change against the anchor is beyond --floor; the "
           "decision is recorded in the file's approval record (and the approval becomes the new anchor)",
           ("baseline approve",), action="store_true", default=False),
    Option("plot", "also write a PNG of each benchmark's median across approvals, approvals and stack changes "
           "marked (default: not written)", ("history",), metavar="PNG"),
    Option("check", "only check, change nothing: exit 1 when something is missing or differs",
           ("prepare", "stack freeze"), action="store_true", default=False,
           per_front={"prepare": {"help": "only report; exit 1 when a module is missing"},
                      "stack freeze": {"help": "compare the venv with the stack file instead of writing it (exit 1 "
                                               "when they differ)"}}),
)


def _by_name(options: tuple[Option, ...]) -> dict[str, Option]:
    out: dict[str, Option] = {}
    for o in options:
        if o.name in out:
            raise ValueError(f"option {o.name!r} is defined twice: one name has one meaning")
        out[o.name] = o
    return out


BY_NAME = _by_name(OPTIONS)


def option(name: str) -> Option:
    """The option called ``name``; ``KeyError`` naming the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no option {name!r}; known: {', '.join(BY_NAME)}") from None


def options_of(front: str) -> tuple[Option, ...]:
    """The options ``front`` takes, as it takes them, in the registry's order."""
    if front not in FRONT_ENDS:
        raise ValueError(f"unknown front end {front!r}; known: {', '.join(FRONT_ENDS)}")
    return tuple(o.on(front) for o in OPTIONS if front in o.fronts)


#: the gate options that become ``gate.policy.Policy`` fields (``policy_kwargs``)
POLICY = ("floor", "allow-missing", "allow-ambiguous", "fail-on-ambiguous")


def policy_kwargs(given: Callable[[str], Any]) -> dict[str, Any]:
    """``gate.policy.Policy`` keyword arguments from the ``POLICY`` options (percent -> fraction).
    ``given(name)`` returns an option's value; options a front end does not take are left out."""
    out: dict[str, Any] = {}
    for name in POLICY:
        v = given(name)
        if v is not None:
            out[name.replace("-", "_")] = v / 100.0 if option(name).type is percent else v
    return out
