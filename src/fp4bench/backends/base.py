"""The backend contract: one small interface every GEMM implementation under test fulfils.

A backend is a plain object; pytest never appears here (the plugin is a thin layer on top).
Life of one benchmark case::

    avail = backend.availability(device)          # cheap; never launches a kernel
    why = backend.unsupported_reason(problem)     # shape/alignment gate, None when runnable
    prep = backend.prepare(problem, operands, device)   # layouts, buffers: untimed
    for tactic in backend.tactics(problem, device):
        out = backend.run(prep, tactic)           # the timed call; writes prep.out

Capability gating happens in ``availability`` *before* any library call: several FP4 entry
points poison the CUDA context instead of raising on the wrong GPU
(e.g. ``F.scaled_grouped_mm`` NVFP4 on SM90, torch 2.11).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from fp4bench.backends.alignment import AlignmentPolicy, Skipped, align_problem
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here, and a one-line reason (the pytest skip message)."""

    ok: bool
    reason: str
    version: str | None = None

    @classmethod
    def yes(cls, version: str | None = None, reason: str = "available") -> "Availability":
        return cls(True, reason, version)

    @classmethod
    def no(cls, reason: str, version: str | None = None) -> "Availability":
        return cls(False, reason, version)


def availability_of(backend: "Backend", device: Any) -> Availability:
    """``backend.availability(device)``, where an exception (a broken third-party plugin or
    library) makes that one backend unavailable, with the exception as the reason, instead of
    aborting the whole run."""
    try:
        a = backend.availability(device)
    except Exception as exc:
        return Availability.no(f"availability() raised {type(exc).__name__}: {exc}")
    if not isinstance(a, Availability):
        return Availability.no(f"availability() returned {type(a).__name__}, not an Availability")
    return a


@dataclass(frozen=True)
class Tactic:
    """One tile config / tactic, as the library takes it (``value``) and as people read it."""

    value: Any
    label: str
    #: the kernel configuration the library runs for it, where known (e.g. a tile table of the
    #: installed version); recorded with each measurement so a re-ordered library is visible
    config: str | None = None
    #: True for the library's own choice (no tactic passed): its kernel may change between
    #: versions by design; an explicit tactic that runs another kernel is a different benchmark
    default: bool = False


DEFAULT_TACTIC = Tactic(value=None, label="default", default=True)


class TacticUnsupported(RuntimeError):
    """A tactic that fails to initialize for this problem (recorded as data, not a crash)."""


@dataclass
class Prepared:
    """Everything ``run`` needs, built outside the timed region.

    ``out`` is the output buffer the kernel writes (the verify layer poisons it before each
    checked call); ``args`` holds the backend's own marshalled arguments.
    """

    problem: Problem
    out: torch.Tensor
    args: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    """Base class. Subclasses set the class attributes and implement the four methods."""

    name: ClassVar[str]
    #: problem kinds it runs: "dense", "grouped", "moe"
    kinds: ClassVar[frozenset[str]]
    #: formats of the operands it consumes, keys of problems.BYTES_PER_ELEMENT
    act_format: ClassVar[str]
    weight_format: ClassVar[str]
    #: human-readable description of what is being called
    api: ClassVar[str] = ""
    #: True for the test-only backends of ``fp4bench.testing`` (faults, slowdown wrappers): a run
    #: that measures one is recorded as such and never becomes a baseline
    test_only: ClassVar[bool] = False
    #: shape rule the library checks (N % n_multiple, K % k_multiple); misaligned problems are
    #: reported unsupported with the policy's name, never run
    alignment: ClassVar[AlignmentPolicy | None] = None
    #: None when ``run`` can be captured into a CUDA graph; else why not (the timer then uses
    #: back-to-back launches between events and says so, instead of attempting a capture that
    #: fails mid-way and invalidates the capture stream)
    no_graph_reason: ClassVar[str | None] = None
    #: device types ("cuda", "cpu") on which the backend runs only when named in the backend
    #: selection, and why (``sweep.cases_for`` lists its cases as skipped with that reason)
    named_only_on: ClassVar[frozenset[str]] = frozenset()
    named_only_reason: ClassVar[str] = ""
    #: how often the library rounds the output to bf16 (2 when it scales a bf16 result again,
    #: e.g. ``torch._scaled_mm`` v1 followed by ``out.mul_(alpha)``): widens the verify bound by
    #: exactly that rounding, nothing else
    output_roundings: ClassVar[int] = 1
    #: True for a *library-choice row*: it calls the library the way a serving engine does (the
    #: library picks backend and tactic, e.g. FlashInfer's ``auto`` and autotuner) and says what it
    #: picked in ``library_choice``; the sweep runs such rows after the explicit rows of a problem
    choice_row: ClassVar[bool] = False

    @abstractmethod
    def availability(self, device: torch.device) -> Availability:
        """Importable? Right version? Supported compute capability? Never launches work."""

    def unsupported_reason(self, problem: Problem) -> str | None:
        """None when ``problem`` can run; else why not (alignment, kind)."""
        if problem.kind not in self.kinds:
            return f"{self.name} does not run {problem.kind} problems"
        if self.alignment is not None:
            checked = align_problem(problem, self.alignment)
            if isinstance(checked, Skipped):
                return f"{self.name}: {checked.reason}"
        return None

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        """Every tile config / tactic the library exposes for this problem."""
        return [DEFAULT_TACTIC]

    @abstractmethod
    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        """Marshal the shared quantized operands into this library's layout; allocate ``out``."""

    @abstractmethod
    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        """Launch once with ``tactic``; returns the output. Timed: no host syncs.

        Writes ``prepared.out`` and returns it, so the verify layer's poisoning can see
        unwritten elements; an API without an ``out=`` argument returns its own tensor.

        Raises ``TacticUnsupported`` when the tactic cannot initialize for this problem.
        """

    def reference_options(self, prepared: Prepared) -> dict[str, Any]:
        """Keyword arguments of the reference this backend's output must match, for what the
        kernel does between its GEMMs (e.g. an NVFP4 fused MoE re-quantizes its intermediate
        with a calibrated global scale); {} = the plain reference of the problem's kind."""
        return {}

    def failure_hint(self, prepared: Prepared) -> str:
        """Text appended to a failed check's message: a known cause outside the adapter (e.g. an
        environment variable that changes the library's rounding); '' when there is none."""
        return ""

    def library_choice(self, prepared: Prepared) -> dict[str, Any] | None:
        """What the library chose on the last ``run`` of ``prepared`` (a choice row; recorded as
        ``extra_info["choice"]``, read by ``gate.picks``): ``{"backend", "tactic", "tuned",
        "compare_with"}``; None for a row whose caller fixes backend and tactic."""
        return None

    def describe(self) -> str:
        return f"{self.name} ({self.api})" if self.api else self.name
