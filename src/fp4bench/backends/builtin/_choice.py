"""What FlashInfer's autotuner chose for a call: a log of ``AutoTuner.choose_one``'s answers.

Every FlashInfer entry point that lets the library pick (``mm_fp4`` with any backend,
``cutlass_fused_moe`` without ``profile_ids``) asks the process-wide tuner
``AutoTuner.get().choose_one(custom_op, runners, tuning_config, inputs, **kwargs)`` for
``(runner, tactic)`` and runs that (flashinfer/autotuner/autotuner.py ``AutoTuner.choose_one``;
callers: flashinfer/gemm/gemm_base.py ``mm_fp4``, custom op ``"fp4_gemm"``;
flashinfer/fused_moe/core.py, ops ``"trtllm::fused_moe::gemm1"`` / ``"...::gemm2"``). Outside
tuning mode it answers from its cache, else with ``(runners[0], -1)``: the heuristic's first
backend with its default tactic. The library returns neither to the caller, so ``ChoiceLog``
wraps the tuner instance's ``choose_one``: the call path and its answers stay the library's, the
log keeps the last answer per op as (runner index, tactic).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

#: the attribute a wrapped ``choose_one`` carries its log under (one log per tuner instance)
_LOG_ATTR = "_fp4bench_choice_log"


def jsonable(tactic: Any) -> Any:
    """A tactic as JSON can hold it: ints, strings and (nested) lists of them; anything else as repr."""
    if isinstance(tactic, bool) or tactic is None:
        return tactic
    if isinstance(tactic, (int, str)):
        return tactic
    if isinstance(tactic, (list, tuple)):
        return [jsonable(t) for t in tactic]
    try:
        return int(tactic)
    except (TypeError, ValueError):
        return repr(tactic)


class ChoiceLog:
    """The last ``(runner index, tactic)`` the tuner answered per custom op."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int | None, Any]] = {}

    @classmethod
    def on(cls, tuner: Any) -> "ChoiceLog":
        """The log of ``tuner`` (wrapping its ``choose_one`` the first time)."""
        current = tuner.choose_one
        log = getattr(current, _LOG_ATTR, None)
        if log is not None:
            return log
        log = cls()

        def choose_one(custom_op: str, runners: list, tuning_config: Any, inputs: list, **kwargs: Any) -> Any:
            runner, tactic = current(custom_op, runners, tuning_config, inputs, **kwargs)
            index = next((i for i, r in enumerate(runners) if r is runner), None)
            log.last[custom_op] = (index, jsonable(tactic))
            return runner, tactic

        setattr(choose_one, _LOG_ATTR, log)
        tuner.choose_one = choose_one
        return log

    def forget(self) -> None:
        self.last.clear()

    def answer(self, custom_op: str, what: str) -> tuple[int | None, Any]:
        """The last answer for ``custom_op``; a RuntimeError naming ``what`` when the call asked none."""
        if custom_op not in self.last:
            raise RuntimeError(f"{what}: the call never asked FlashInfer's autotuner for {custom_op!r} "
                               f"(AutoTuner.choose_one); the library's dispatch changed")
        return self.last[custom_op]


@contextlib.contextmanager
def _answering(tuner: Any, custom_op: str, answer: Callable[[list, list], Any]) -> Iterator[None]:
    """Within the block, ``tuner.choose_one`` answers ``custom_op`` with ``answer(runners, inputs)``
    and asks the tuner as before for every other op; afterwards the tuner is as it was."""
    had_own = "choose_one" in vars(tuner)
    inner = tuner.choose_one

    def choose_one(op: str, runners: list, tuning_config: Any, inputs: list, **kwargs: Any) -> Any:
        if op == custom_op:
            return answer(runners, inputs)
        return inner(op, runners, tuning_config, inputs, **kwargs)

    tuner.choose_one = choose_one
    try:
        yield
    finally:
        if had_own:
            tuner.choose_one = inner
        else:
            del tuner.choose_one


@contextlib.contextmanager
def pinned(tuner: Any, custom_op: str, tactic: Any) -> Iterator[None]:
    """Within the block, ``tuner`` answers ``custom_op`` with ``(runners[0], tactic)``: an explicit
    tactic through an entry point that takes none, delivered the way the library delivers a cached
    tuning result (the op's own launcher runs it); the tuner's ``ChoiceLog`` records it."""
    log = getattr(tuner.choose_one, _LOG_ATTR, None)

    def answer(runners: list, inputs: list) -> Any:
        if log is not None:
            log.last[custom_op] = (0, jsonable(tactic))
        return runners[0], tactic

    with _answering(tuner, custom_op, answer):
        yield


@contextlib.contextmanager
def captured(tuner: Any, custom_op: str) -> Iterator[dict[str, Any]]:
    """Within the block, ``tuner`` answers ``custom_op`` with ``(runners[0], -1)`` (the library's
    default tactic) and the yielded dict keeps that call's ``runners`` and ``inputs``: what a
    runner's ``get_valid_tactics(inputs, profile)`` enumerates from."""
    got: dict[str, Any] = {}

    def answer(runners: list, inputs: list) -> Any:
        got.update(runners=list(runners), inputs=list(inputs))
        return runners[0], -1

    with _answering(tuner, custom_op, answer):
        yield got
