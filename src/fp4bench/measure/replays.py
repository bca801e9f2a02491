"""Later launches of a checked case: replays with changing inputs, rotating copies, scale padding.

``verify.check_case`` holds the first two launches of a case to the reference. The failures
that reach serving are often later ones: a tactic that passes warm-up and corrupts its output
under CUDA-graph replay, a kernel that drifts, one that is right at one address and wrong at
another, one that reads scale padding nobody wrote. Each gets its own named kind here:

* ``replay mismatch``: the launch (a CUDA graph of one call on a GPU, the eager call off it) is
  replayed ``n`` times, the inputs alternating between operand sets copied into the launched
  buffers (``OperandSet.load``), the output poisoned with ``verify.SENTINEL`` before each replay
  and every replay's output classified against its set's reference with ``verify``'s kinds. The
  outputs are kept and classified after the last replay, so the replays run back to back as
  in serving, with no host synchronization between them. An output bit-identical to one of the
  same set that passed has that verdict without being classified again (a deterministic kernel
  costs two classifications and ``n`` comparisons). The detail says how many replays were
  wrong, the first one and the kind it showed.
* ``copy mismatch``: a rotating copy (same bytes, its own allocation) whose check fails while
  the first copy's passed (the caller checks each copy once with ``verify.check_case``).
* ``reads scale padding``: the case fails with ``formats.POISON_BYTE`` in the padding of its
  scale buffers and passes with zeros there (the caller re-prepares and re-checks).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fp4bench.measure.verify import OK, SENTINEL, WRONG_LAYOUT, CheckResult, classify, layout_error
from fp4bench.options.values import DEFAULT_REPLAYS  # noqa: F401 (the rule's default)
from fp4bench.reference.bulk import BulkTolerance

REPLAY_MISMATCH = "replay mismatch"
COPY_MISMATCH = "copy mismatch"
READS_PADDING = "reads scale padding"
LATER_LAUNCH_KINDS = (REPLAY_MISMATCH, COPY_MISMATCH, READS_PADDING)

#: a case whose call is long gets fewer replays, as many as fit this share of its time budget,
#: but never fewer than ``MIN_REPLAYS`` (each operand set twice)
REPLAY_BUDGET_SHARE = 0.05
MIN_REPLAYS = 4
#: the outputs of all replays are kept until the last one ran; above this many bytes of them
#: the replays are fewer (never below ``MIN_REPLAYS``)
MAX_KEPT_BYTES = 1 << 30


def replays_for(requested: int, est_call_s: float | None, budget_s: float, output_bytes: int) -> int:
    """Replays of one case: ``requested`` (0: none), fewer for a call too long to replay that
    often within ``REPLAY_BUDGET_SHARE`` of the time budget or outputs too large to keep them all,
    never fewer than ``MIN_REPLAYS``."""
    if requested <= 0:
        return 0
    n = requested
    if est_call_s is not None and est_call_s > 0 and math.isfinite(est_call_s):
        n = min(n, int(REPLAY_BUDGET_SHARE * budget_s / est_call_s))
    if output_bytes > 0:
        n = min(n, MAX_KEPT_BYTES // output_bytes)
    return max(min(requested, MIN_REPLAYS), n)


def check_output(result: Any, ref: torch.Tensor, bound: torch.Tensor | float, bulk: BulkTolerance,
                 out: torch.Tensor) -> CheckResult:
    """One output written over ``SENTINEL`` (``out``: the buffer the kernel was to write), with
    ``verify``'s kinds: an element still holding the sentinel was not written."""
    wrong = layout_error(result, out, ref)
    if wrong:
        return CheckResult(WRONG_LAYOUT, f"output has {wrong}")
    got = result.float()
    first = torch.where(got == SENTINEL, torch.full_like(got, float("nan")), got)
    return classify(first, got, ref.float(), bound, bulk)


@dataclass
class OperandSet:
    """One input of the replays: ``load`` puts its bytes into the launched buffers, ``check``
    classifies one output against its reference."""

    name: str
    load: Callable[[], None]
    check: Callable[[Any], CheckResult]


def snapshot(result: Any) -> Any:
    """A copy of a launch's result that the next replay does not overwrite (tensors cloned,
    also inside a dataclass or tuple such as a quantizer's output)."""
    if isinstance(result, torch.Tensor):
        if result.element_size() == 1 and result.dtype not in (torch.uint8, torch.bool):
            return result.view(torch.uint8).clone().view(result.dtype)  # FP4/FP8 types: few ops
        return result.clone()
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.replace(result, **{f.name: snapshot(getattr(result, f.name))
                                              for f in dataclasses.fields(result) if f.init})
    if isinstance(result, tuple):
        return tuple(snapshot(r) for r in result)
    return result


def identical(a: Any, b: Any) -> bool:
    """The same bytes (tensors compared bitwise, NaN payloads included; also inside a dataclass
    or tuple)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (a.shape == b.shape and a.dtype == b.dtype
                and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                b.contiguous().reshape(-1).view(torch.uint8)))
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        return all(identical(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.init)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    return a is b or (not isinstance(a, torch.Tensor) and a == b)


@dataclass
class ReplayReport:
    """What the replays showed: the result (``OK`` or ``REPLAY_MISMATCH``), how many ran and how
    many were wrong, and how they were launched."""

    result: CheckResult
    replays: int
    failed: int
    method: str

    def to_extra_info(self) -> dict[str, Any]:
        return {"replays": self.replays, "replays_failed": self.failed, "replay_method": self.method,
                "replay_check": self.result.kind}


def replay_check(launch: Callable[[], Any], poison: Callable[[], None], sets: Sequence[OperandSet], n: int,
                 method: str, sync: Callable[[], None] = lambda: None) -> ReplayReport:
    """``n`` launches, replay ``i`` on ``sets[i % len(sets)]`` (loaded before it), each into a
    poisoned output, then every output classified. The first set is loaded again at the end,
    so the buffers hold what they held before."""
    if n < 1 or not sets:
        raise ValueError(f"replay_check needs n >= 1 and at least one operand set, got n={n}, {len(sets)} sets")
    kept = []
    try:
        for i in range(n):
            if i < len(sets) or len(sets) > 1:
                sets[i % len(sets)].load()
            poison()
            kept.append(snapshot(launch()))
        sync()
    finally:
        sets[0].load()
    bad = []
    passed: dict[int, Any] = {}  # set -> an output of it that passed
    for i, got in enumerate(kept):
        j = i % len(sets)
        if j in passed and identical(got, passed[j]):
            continue  # the very bytes of an output that passed: the same verdict, no classify
        res = sets[j].check(got)
        if not res.ok:
            bad.append((i, res))
        else:
            passed.setdefault(j, got)
    if not bad:
        return ReplayReport(CheckResult(OK), n, 0, method)
    i, first = bad[0]
    detail = (f"{len(bad)} of {n} replays; first bad: replay {i + 1} (operand set {sets[i % len(sets)].name}): "
              f"{first.kind}" + (f": {first.detail}" if first.detail else ""))
    return ReplayReport(CheckResult(REPLAY_MISMATCH, detail), n, len(bad), method)


def launcher(fn: Callable[[], Any], device: torch.device, no_graph_reason: str | None
             ) -> tuple[Callable[[], Any], str, Any]:
    """How the replays launch ``fn``: on CUDA a graph of one call, captured on its own stream as
    the timer captures (``measure.timing.capture``), each replay returning the tensors the
    captured call returned; eager calls where the backend cannot be captured, the capture
    fails, or off CUDA. Returns ``(launch, method, keep-alive)``."""
    if device.type != "cuda":
        return fn, "eager calls", None
    if no_graph_reason:
        return fn, f"eager calls (no CUDA graph: {no_graph_reason})", None
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(stream):
            fn()  # warm on the capture stream (allocator, lazy init)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = fn()
    except Exception as exc:  # capture is a property of the backend, not a failure of it
        torch.cuda.synchronize(device)
        return fn, f"eager calls (graph capture failed: {type(exc).__name__})", None

    def replay() -> Any:
        graph.replay()
        return captured

    return replay, "cuda-graph replays", (graph, stream)


def copy_mismatch(index: int, copies: int, check: CheckResult) -> CheckResult:
    """Copy ``index`` (0-based; 0 is the checked operand set) of ``copies`` failed its check."""
    return CheckResult(COPY_MISMATCH, f"rotating copy {index + 1} of {copies} (its own allocation, the same bytes) "
                                      f"gave {check.kind}" + (f": {check.detail}" if check.detail else "")
                                      + "; copy 1 passed")


def reads_padding(filled: int, poisoned: CheckResult) -> CheckResult:
    """The case failed with poison in its ``filled`` padding entries and passed with zeros."""
    return CheckResult(READS_PADDING, f"with 0xFF (NaN) in the {filled} padding entries of its scale buffers the "
                                      f"output has {poisoned.kind}" + (f" ({poisoned.detail})" if poisoned.detail else "")
                                      + "; with zeros there it passes: the kernel reads scale padding")
