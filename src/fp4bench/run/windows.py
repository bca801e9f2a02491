"""Independent measurement windows of a pytest run.

A window is one measurement of a case in fresh device memory: the runner releases every cached
operand set, reference and prepared layout first (``CaseRunner.release``), so the window's
operands are made again from the seed (the same bytes) into new allocations, with their own
graph capture and rotating copies (``CaseRunner._rotating_calls``: none is kept from an earlier
window).

What a window samples: a memory-bound kernel's time depends on where its buffers landed in
device memory, and operands released and made again in one process land on nearly the same
placement every time (docs/results-h200.md, run 23: a grouped bf16 b1 row 98.5 µs +-0.6 % over
8 such re-makes, where copies made beside live ones landed 18 % apart). So the placement a
window draws is not independent of the previous window's; what makes a window's time a mean
over placements is its own ``--fp4-min-copies`` (default 4) rotating copies, each cloned while
the others are alive, at another place (measure.copies: the spread between placement sets fell
to 0.04-0.42 % on the grouped bf16 b1 rows, run 24). A window then samples the clock, power and
capture state of its minute and a placement set whose residue is that small. Samples inside one
window share all of it, so they say how well that window's median is known and nothing about
the next window; the gate (``gate.rule``) treats each window median as one replicate.

Two ways a run takes more than one window of a case:

* ``--fp4-windows N`` (default 3 with ``--fp4-save-baseline``, else 1): after the normal loop
  over the tests (window 1 of every case), ``extra_passes`` walks the whole sweep again, N-1
  times. Pass k of case i is separated from pass k-1 of the same case by a full sweep (minutes),
  so its windows meet different clock, thermal and power states, and every case sees the same
  sequence of states (interleaved passes). Taking the windows back to back inside each test
  would leave them seconds apart in one power state, which is what makes a single-window
  baseline misleading.
* a suspect (``Verdict.wants_more``) takes its next window in its own test, at once
  (``settle``, run by ``plugin.cases.gate``), within ``--fp4-max-windows`` and
  ``--fp4-window-budget``.

Every window after a case's first is taken in a fresh placement set (``take_window(...,
placement)``: a release, then ``CaseRunner.new_placement`` holds a pad of a size drawn from the
window's index, so the window's operands and copies land elsewhere), so windows are independent
in placement as well as in clock and capture state: a FAIL, which needs two new windows, rests on
at least two placements. What the windows of one process still share is the run term
(``gate.calibration``: measured per unit by ``fp4bench calibrate``), which the rule carries in
its error.
"""

from __future__ import annotations

from typing import Any, Callable


def take_window(runner: Any, backend: Any, spec: Any, placement: int | None = None
                ) -> tuple[list[float] | None, str]:
    """One more window of ``spec``: (samples, "") or (None, why it could not be measured).
    ``placement``: the window's index, which draws its fresh placement set
    (``CaseRunner.new_placement``)."""
    from fp4bench.run.case import MEASURED

    runner.release()  # fresh memory: an unlucky placement is not measured twice
    if placement is not None:
        runner.new_placement(placement)
    res = runner.run(backend, spec.problem, spec.tactic)
    if res.status != MEASURED or res.timing is None:
        return None, f"{res.status}: {res.reason}"
    return list(res.timing.samples_s), ""


def settle(judge_at: Callable[[list, bool], Any], take: Callable[[int], tuple[list[float] | None, str]],
           windows: list, max_windows: int, budget_ok: Callable[[], bool] = lambda: True,
           on_error: Callable[[str], None] = lambda why: None) -> Any:
    """The gate's window loop for one case (``plugin.cases.gate``): judge ``windows``
    (``judge_at(windows, budget_left)`` returns a ``gate.verdict.Verdict``); while the verdict
    wants more and ``len(windows) < max_windows`` and ``budget_ok()``, take the next window
    (``take(index)``: its own fresh placement set, ``take_window``) and judge again. A window
    that cannot be measured ends the loop on what was measured (``on_error(why)``). Returns the
    last verdict; ``windows`` holds every window taken."""
    while True:
        budget_left = len(windows) < max_windows and budget_ok()
        v = judge_at(windows, budget_left)
        if not v.wants_more:
            return v
        window, why = take(len(windows))
        if window is None:  # the case broke on a re-measure: judge what was measured
            on_error(why)
            max_windows = len(windows)
            continue
        windows.append(window)


def window_count(config: Any) -> int:
    """``--fp4-windows``, or its default: 3 when the run is saved as a baseline candidate, else 1."""
    n = config.getoption("fp4_windows")
    if n is None:
        return 3 if config.getoption("fp4_save_baseline") else 1
    return n


def extra_passes(session: Any, passes: int, should_stop=lambda: False,
                 progress: Callable[[int, int], None] = lambda done, total: None) -> int:
    """Passes 2..``passes`` over every measured case of ``session`` (an ``Fp4Session``), in the
    order they ran; a window that cannot be measured is recorded in ``window_errors`` (the run is
    then not clean). ``progress(done, total)`` is called after each window (the console prints
    a line with its ETA when one is due). Returns the number of windows taken."""
    taken = done = 0
    cases = list(session.cases.items())
    total = (passes - 1) * len(cases)
    for _ in range(passes - 1):
        for fullname, (backend, spec) in cases:
            if should_stop():
                return taken
            samples, why = take_window(session.runner, backend, spec, len(session.windows[fullname]))
            done += 1
            progress(done, total)
            if samples is None:
                session.window_errors.append((fullname, why))
                continue
            session.windows[fullname].append(samples)
            taken += 1
    return taken
