"""Which cases a run measures: options -> (backend, problem, tactic) specs, problem-major.

Problem-major order keeps the operand cache hot (one problem's quantized operands serve
every backend and tactic before the next problem is drawn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from fp4bench.backends.alignment import Aligned, align_problem
from fp4bench.backends.base import DEFAULT_TACTIC, Backend, Tactic, availability_of
from fp4bench.problems import GemmProblem, Origin, Problem, quant_problems
from fp4bench.workloads import decode_problems, get_model

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

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.tactic.label}-{self.problem.id}"


def sweep_options(given: Callable[[str], Any], base: Mapping[str, Any], on_gpu: bool,
                  flag: str = "--") -> SweepOptions:
    """The sweep to run from the ``options.SWEEP`` values; ``given(name)`` is an option's value
    (``None``: not given). Given values win; then the active baseline's ``sweep`` (a compare run
    measures what the baseline measured, so nothing is MISSING by accident); then the defaults.
    ``ValueError`` names the bad value and its option (``flag`` + name). Backend names are not
    checked here (a worker may register backends its parent does not know)."""
    from fp4bench.options import parse_batches, parse_kinds, parse_models, parse_routings, parse_tps, split_list

    def pick(option: str, key: str, default):
        v = given(option)
        if v is not None:
            return v
        b = base.get(key)
        if isinstance(b, list):
            return ",".join(str(x) for x in b) if b else default
        return b if b is not None else default

    models = parse_models(pick("models", "models", "glm-5"), f"{flag}models")
    backends = pick("backends", "backends", None)
    full = bool(pick("full", "full", False))
    routings = pick("routing", "routings", "uniform")
    parse_routings(routings, f"{flag}routing")  # a bad spec is a usage error now, not a collection traceback
    return SweepOptions(models=tuple(m.name for m in models),
                        batches=parse_batches(pick("batches", "batches", "1,64,512" if on_gpu else "1,16"),
                                           f"{flag}batches"),
                        tps=parse_tps(str(pick("tp", "tps", "1")), models, f"{flag}tp"),
                        routings=tuple(split_list(routings, f"{flag}routing")),
                        kinds=parse_kinds(pick("kinds", "kinds", "dense,grouped,moe"), f"{flag}kinds"),
                        backends=tuple(split_list(backends, f"{flag}backends")) if backends else None,
                        full=full, tactics=pick("tactics", "tactics", "all" if full else "default"),
                        seed=given("seed") or 0)


#: sweep option -> (the ``extra_info`` key a measured case records it under, the option's values)
_NARROWING: dict[str, tuple[str, Callable[[SweepOptions], Any]]] = {
    "backends": ("backend", lambda o: o.backends),
    "models": ("model", lambda o: o.models),
    "kinds": ("kind", lambda o: o.kinds),
    "batches": ("batch", lambda o: o.batches),
    "tp": ("tp", lambda o: o.tps),
}


def selection_of(opts: SweepOptions, given: Callable[[str], Any]) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether a baseline benchmark (its ``extra_info``) lies inside the sweep options the user
    gave (``given(name)`` not None): ``--fp4-backends torch-bf16`` leaves the other backends'
    benchmarks out of what the run is expected to measure, as ``-k`` does. None when no given
    option narrows. A benchmark that did not record a key is kept; the dense M sweep's rows
    (``routing`` ``dense-sweep``, ``batch`` = M) are not narrowed by ``batches``."""
    checks = [(key, {str(v) for v in values(opts)}) for name, (key, values) in _NARROWING.items()
              if given(name) is not None and values(opts) is not None]
    if not checks:
        return None

    def selected(extra: Mapping[str, Any]) -> bool:
        for key, allowed in checks:
            if key == "batch" and extra.get("routing") == "dense-sweep":
                continue
            if extra.get(key) is not None and str(extra[key]) not in allowed:
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
    """Every case of the sweep; unavailable backends give one skipped case per problem."""
    specs: list[CaseSpec] = []
    chosen = [b for b in backends if opts.backends is None or b.name in opts.backends]
    avail = {b.name: availability_of(b, device) for b in chosen}
    for problem in problems_for(opts):
        too_big = device.type == "cpu" and operand_bytes(problem) > CPU_OPERAND_LIMIT_BYTES
        for b in chosen:
            if problem.kind not in b.kinds:
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
            if not (opts.full or opts.tactics == "all"):
                tactics = quick_tactics(tactics)
            specs += [CaseSpec(b.name, prob, t, note=note) for t in tactics]
    return specs


def quick_tactics(tactics: list[Tactic]) -> list[Tactic]:
    """Default run: what the library runs when the caller passes no tactic (the full sweep runs
    all of them): ``Tactic.default``, or by the labels third-party backends use for it. A backend
    without such a row gets its first tactic."""
    for t in tactics:
        if t.default or t.value is None or t.label in ("default", "auto") or t.label.startswith("auto"):
            return [t]
    return tactics[:1]
