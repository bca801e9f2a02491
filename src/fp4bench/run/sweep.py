"""Which cases a run measures: options -> (backend, problem, tactic) specs, problem-major.

Problem-major order keeps the operand cache hot (one problem's quantized operands serve
every backend and tactic before the next problem is drawn).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterator, Mapping

import torch

from fp4bench.backends.alignment import Aligned, align_problem
from fp4bench.backends.base import DEFAULT_TACTIC, Backend, Tactic, availability_of
from fp4bench.workload.problems import GemmProblem, Origin, Problem, quant_problems
from fp4bench.workload.decode import decode_problems, get_model

# Dense M sweep of the full run: powers of two 1…16384 plus the 32…1536 band where
# FlashInfer #3398 returned zeros on SM120 (flashinfer-ai/flashinfer issue #3398).
FULL_DENSE_M = sorted({2 ** i for i in range(15)} | {48, 96, 192, 384, 768, 1536})
# Operands above this size are not drawn on a CPU-only machine (a GLM-5 grouped layer is ~13 GB).
CPU_OPERAND_LIMIT_BYTES = 2 * 2 ** 30


@dataclass(frozen=True)
class SweepOptions:
    models: tuple[str, ...] = ("glm-5",)
    batches: tuple[int, ...] = (1, 64, 512)
    tps: tuple[int, ...] = (1,)
    routings: tuple[str, ...] = ("uniform",)
    kinds: tuple[str, ...] = ("dense", "grouped", "moe")
    backends: tuple[str, ...] | None = None  # None: all registered
    full: bool = False  # dense M sweep 1…16384 (and every tactic)
    tactics: str = "default"  # "default": one tactic per backend; "all": every tactic
    seed: int = 0

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class CaseSpec:
    backend: str
    problem: Problem
    tactic: Tactic = field(default=DEFAULT_TACTIC)
    skip_reason: str = ""
    note: str = ""  # e.g. how the problem was padded for this backend, as serving stacks pad it
    #: the smallest ``--fp4-tactics`` whose sweep holds this case: "default" (the backend's quick
    #: tactic) or "all" (recorded with each measurement as ``tactic_sweep``)
    tactic_sweep: str = "default"

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.tactic.label}-{self.problem.id}"


def sweep_options(given: Callable[[str], Any], base: Mapping[str, Any], on_gpu: bool,
                  flag: str = "--", source: str = "the baseline") -> SweepOptions:
    """The sweep to run from the ``options.SWEEP`` values; ``given(name)`` is an option's value
    (``None``: not given). Given values win; then the active baseline's ``sweep`` (a compare run
    measures what the baseline measured, so nothing is MISSING by accident); then the defaults.
    ``ValueError`` names the bad value and where it came from: its option (``flag`` + name), or
    the ``sweep`` field of ``source`` when the baseline recorded it. Backend names are not
    checked here (a worker may register backends its parent does not know)."""
    from fp4bench.options.values import parse_batches, parse_kinds, parse_models, parse_routings, parse_tps, split_list

    where: dict[str, str] = {}

    def pick(option: str, key: str, default):
        where[option] = f"{flag}{option}"
        v = given(option)
        if v is not None:
            return v
        b = base.get(key)
        if b is not None and not (isinstance(b, list) and not b):
            where[option] = f"{source}: recorded sweep field {key!r}"
        if isinstance(b, list):
            return ",".join(str(x) for x in b) if b else default
        return b if b is not None else default

    models_text = pick("models", "models", "glm-5")
    with _named(where["models"]):
        models = parse_models(models_text, where["models"])
    backends = pick("backends", "backends", None)
    full = bool(pick("full", "full", False))
    routings = pick("routing", "routings", "uniform")
    with _named(where["routing"]):
        parse_routings(routings, where["routing"])  # a bad spec is a usage error now, not a collection traceback
    batches_text = pick("batches", "batches", "1,64,512" if on_gpu else "1,16")
    with _named(where["batches"]):
        batches = parse_batches(batches_text, where["batches"])
    tps_text = str(pick("tp", "tps", "1"))
    with _named(where["tp"]):
        tps = parse_tps(tps_text, models, where["tp"])
    kinds_text = pick("kinds", "kinds", "dense,grouped,moe")
    with _named(where["kinds"]):
        kinds = parse_kinds(kinds_text, where["kinds"])
    tactics = pick("tactics", "tactics", "all" if full else "default")
    if tactics not in ("default", "all"):
        raise ValueError(f"{where['tactics']}: expected 'default' or 'all', got {tactics!r}")
    with _named(where["backends"]):
        chosen = tuple(split_list(backends, where["backends"])) if backends else None
    return SweepOptions(models=tuple(m.name for m in models), batches=batches, tps=tps,
                        routings=tuple(split_list(routings, where["routing"])), kinds=kinds, backends=chosen,
                        full=full, tactics=tactics, seed=given("seed") or 0)


@contextmanager
def _named(what: str) -> Iterator[None]:
    """A ``ValueError`` raised inside names ``what`` (the option, or the baseline's field) first."""
    try:
        yield
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(what) else f"{what}: {msg}") from None


def _routing_tags(opts: SweepOptions) -> set[str]:
    from fp4bench.workload.decode import parse_routing

    return {parse_routing(r).tag for r in opts.routings}


def _tactic_sweep(extra: Mapping[str, Any]) -> str | None:
    """The ``tactic_sweep`` a benchmark recorded; for one recorded without it, the library's own
    default tactic (``explicit_tactic`` False) is the default sweep's and any other is "all"."""
    if extra.get("tactic_sweep") is not None:
        return str(extra["tactic_sweep"])
    explicit = extra.get("explicit_tactic")
    return None if explicit is None else ("all" if explicit else "default")


def _recorded(key: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda extra: extra.get(key)


#: sweep option -> (what a measured case recorded for it, from its ``extra_info``; the values the
#: option selects, None where it selects everything)
_NARROWING: dict[str, tuple[Callable[[Mapping[str, Any]], Any], Callable[[SweepOptions], Any]]] = {
    "backends": (_recorded("backend"), lambda o: o.backends),
    "models": (_recorded("model"), lambda o: o.models),
    "kinds": (_recorded("kind"), lambda o: o.kinds),
    "batches": (_recorded("batch"), lambda o: o.batches),
    "tp": (_recorded("tp"), lambda o: o.tps),
    "routing": (_recorded("routing"), _routing_tags),
    # "all" holds every tactic; "default" (without --fp4-full) only each backend's quick one
    "tactics": (_tactic_sweep, lambda o: None if o.full or o.tactics == "all" else ("default",)),
}
#: options the dense M sweep of ``--fp4-full`` ignores (its rows record routing ``dense-sweep``
#: and batch = M)
_NOT_IN_DENSE_SWEEP = ("batches", "routing")


def unnamed_backends(opts: SweepOptions, backends: list[Backend], device_type: str) -> frozenset[str]:
    """The backends the sweep leaves out on ``device_type`` because they run there only when
    named (``Backend.named_only_on``) and the options name no backend."""
    if opts.backends is not None:
        return frozenset()
    return frozenset(b.name for b in backends if device_type in b.named_only_on)


def selection_of(opts: SweepOptions, given: Callable[[str], Any],
                 unnamed: Collection[str] = ()) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether a baseline benchmark (its ``extra_info``) lies inside the sweep options the user
    gave (``given(name)`` not None): ``--fp4-backends torch-bf16`` leaves the other backends'
    benchmarks out of what the run is expected to measure, as ``-k`` does; so do ``--fp4-models``,
    ``--fp4-kinds``, ``--fp4-batches``, ``--fp4-tp``, ``--fp4-routing`` and ``--fp4-tactics
    default``, and the ``unnamed`` backends (``unnamed_backends``). None when nothing narrows.
    A benchmark that did not record a value is kept."""
    checks = [(name, recorded, {str(v) for v in values(opts)}) for name, (recorded, values) in _NARROWING.items()
              if given(name) is not None and values(opts) is not None]
    left_out = frozenset(unnamed)
    if not checks and not left_out:
        return None

    def selected(extra: Mapping[str, Any]) -> bool:
        if extra.get("backend") in left_out:
            return False
        for name, recorded, allowed in checks:
            if name in _NOT_IN_DENSE_SWEEP and extra.get("routing") == "dense-sweep":
                continue
            value = recorded(extra)
            if value is not None and str(value) not in allowed:
                return False
        return True

    return selected


def operand_bytes(problem: Problem) -> int:
    """bf16 originals + fp32 decoded copies drawn for the problem (what a CPU run must hold)."""
    return problem.operand_elements * (2 + 4)


def problems_for(opts: SweepOptions) -> list[Problem]:
    out: list[Problem] = []
    for model in opts.models:
        for tp in opts.tps:
            for routing in opts.routings:
                for batch in opts.batches:
                    drawn = decode_problems(model, batch, tp, routing, opts.seed)
                    out += [p for p in drawn + quant_problems(drawn) if p.kind in opts.kinds]
            if opts.full and ("dense" in opts.kinds or "quant" in opts.kinds):
                m = get_model(model)
                (gn, gk), _ = m.gate_up_nk(tp), m.down_nk(tp)
                sweep = [GemmProblem(mm, gn, gk, Origin(m.name, mm, tp, "dense-sweep", "gate_up")) for mm in FULL_DENSE_M]
                out += [p for p in sweep + quant_problems(sweep) if p.kind in opts.kinds]
    seen: dict[str, Problem] = {}
    for p in out:
        seen.setdefault(p.id, p)
    return list(seen.values())


def cases_for(opts: SweepOptions, backends: list[Backend], device: torch.device) -> list[CaseSpec]:
    """Every case of the sweep; unavailable backends give one skipped case per problem, and so
    does a backend left unnamed on a device type it runs on only when named (``named_only_on``)."""
    specs: list[CaseSpec] = []
    # library-choice rows after the explicit rows of each problem: a tuned pick is held to the
    # explicit tactics of the same run as it finishes (``gate.picks.mispick``)
    chosen = sorted((b for b in backends if opts.backends is None or b.name in opts.backends),
                    key=lambda b: b.choice_row)
    unnamed = unnamed_backends(opts, chosen, device.type)
    avail = {b.name: availability_of(b, device) for b in chosen}
    for problem in problems_for(opts):
        too_big = device.type == "cpu" and operand_bytes(problem) > CPU_OPERAND_LIMIT_BYTES
        for b in chosen:
            if problem.kind not in b.kinds:
                continue
            if b.name in unnamed:
                specs.append(CaseSpec(b.name, problem, skip_reason=f"{b.name}: {b.named_only_reason}"))
                continue
            a = avail[b.name]
            if not a.ok:
                specs.append(CaseSpec(b.name, problem, skip_reason=f"{b.name}: {a.reason}"))
                continue
            if too_big:
                gib = operand_bytes(problem) / 2 ** 30
                specs.append(CaseSpec(b.name, problem, skip_reason=(
                    f"{problem.kind} operands need {gib:.1f} GiB; not drawn on a CPU-only machine "
                    f"(limit {CPU_OPERAND_LIMIT_BYTES / 2 ** 30:.0f} GiB)")))
                continue
            prob, note = problem, ""
            pad = getattr(b, "padding", None)
            if pad is not None:  # pad as the serving stacks that use this kernel do
                aligned = align_problem(problem, pad)
                if isinstance(aligned, Aligned):
                    prob, note = aligned.problem, aligned.note
            why = b.unsupported_reason(prob)
            if why:
                specs.append(CaseSpec(b.name, prob, skip_reason=f"{b.name}: {why}"))
                continue
            try:
                tactics = b.tactics(prob, device)
            except Exception as exc:  # e.g. a JIT module missing with JIT disabled: a skip, not a crash
                specs.append(CaseSpec(b.name, prob, skip_reason=(
                    f"{b.name}: could not list its tactics for this problem ({type(exc).__name__}: {exc})")))
                continue
            if not isinstance(tactics, (list, tuple)) or not all(isinstance(t, Tactic) for t in tactics):
                raise ValueError(f"{type(b).__module__}.{type(b).__qualname__} (backend {b.name!r}): tactics() "
                                 f"returned {tactics!r:.80}, not a list of Tactic")
            quick = quick_tactics(tactics)
            if not (opts.full or opts.tactics == "all"):
                tactics = quick
            specs += [CaseSpec(b.name, prob, t, note=note, tactic_sweep="default" if t in quick else "all")
                      for t in tactics]
    return specs


def quick_tactics(tactics: list[Tactic]) -> list[Tactic]:
    """Default run: what the library runs when the caller passes no tactic (the full sweep runs
    all of them): ``Tactic.default``, or by the labels third-party backends use for it. A backend
    without such a row gets its first tactic."""
    for t in tactics:
        if t.default or t.value is None or t.label in ("default", "auto") or t.label.startswith("auto"):
            return [t]
    return tactics[:1]
