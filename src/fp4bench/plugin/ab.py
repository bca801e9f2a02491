"""``pytest bench --fp4-ab-against PYTHON_OR_VENV``: the A/B upgrade gate as a pytest run.

The environment pytest runs in is the candidate (side B); ``--fp4-ab-against`` names the
current stack (side A). The run's selected fp4bench cases (the same ``--fp4-*`` sweep options,
``-k``/``-m`` included) are not timed one by one in this process: they become one test item,
``<file>::fp4bench-ab[<A>]``, that runs ``fp4bench ab`` on them (both sides as worker
processes on the same GPU, in alternating rounds; docs/ab.md) and fails like any test when the
gate finds a regression, its failure text being the A/B verdict table. A passing comparison
prints that table in the terminal summary; ``--fp4-verdict-json`` gets the A/B JSON (with NVML
telemetry per side and round) and ``$GITHUB_STEP_SUMMARY`` the markdown verdict.
"""

from __future__ import annotations

import sys
from fp4bench import clock
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import ReprFileLocation, TerminalRepr




class AbRegression(Exception):
    """The A/B gate failed: the whole verdict report, and its one-line summary."""

    def __init__(self, text: str, summary: str) -> None:
        super().__init__(text)
        self.text, self.summary = text, summary


class AbVerdictRepr(TerminalRepr):
    """The failure text of the A/B item: the whole verdict report under FAILURES, and one line
    (the verdict's summary) as its crash message, which is what ``-rf``'s short summary prints
    (in full on CI, where pytest does not trim it to the terminal width)."""

    def __init__(self, failure: AbRegression, path: str) -> None:
        self.text = failure.text
        self.reprcrash = ReprFileLocation(path, 0, failure.summary)

    def toterminal(self, tw: Any) -> None:
        for line in self.text.splitlines():
            tw.line(line)


class AbItem(pytest.Item):
    """The one test that stands for the selected cases: runs the A/B comparison on them."""

    def __init__(self, *, against: str, case_ids: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.against = against
        self.case_ids = case_ids

    def runtest(self) -> None:
        self.config.pluginmanager.get_plugin("fp4bench.plugin.ab").compare(self)

    def repr_failure(self, excinfo, style=None):  # type: ignore[override]
        if isinstance(excinfo.value, AbRegression):
            return AbVerdictRepr(excinfo.value, str(self.path))
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, self.name


class AbPlugin:
    """Per run: swaps the selected cases for the A/B item, runs it, reports it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.against: str | None = config.getoption("fp4_ab_against", default=None)
        self.text: str | None = None
        self.failed = False
        self.replaced = 0
        if self.against is None:
            if config.getoption("fp4_a_env", default=None):
                raise pytest.UsageError("--fp4-a-env sets the environment of the --fp4-ab-against side: "
                                        "it needs --fp4-ab-against")
            return
        from fp4bench.run.worker.interpreter import interpreter

        try:
            interpreter(self.against)
        except ValueError as exc:
            raise pytest.UsageError(f"--fp4-ab-against: {exc}") from None
        if config.getoption("benchmark_compare", default=None) or config.getoption("fp4_baseline_file") \
                or config.getoption("fp4_save_baseline"):
            raise pytest.UsageError("--fp4-ab-against compares two environments: it takes no baseline "
                                    "(--benchmark-compare, --fp4-baseline-file), saves none (--fp4-save-baseline)")
        # --fp4-replicates, --fp4-rounds, ... are checked by their types (fp4bench.options.values)
        self.env_a = dict(config.getoption("fp4_a_env"))

    @pytest.hookimpl(trylast=True)  # after -k / -m deselection: the A/B run compares what is selected
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        if self.against is None:
            return
        from fp4bench.plugin.console import case_of

        cases = [i for i in items if case_of(i) is not None]
        if not cases:
            return
        label = Path(self.against).name or self.against
        item = AbItem.from_parent(cases[0].parent, name=f"fp4bench-ab[{label}]", against=self.against,
                                  case_ids=[case_of(i).id for i in cases])
        at = items.index(cases[0])  # the A/B item takes the place of the first case
        keep = [i for i in items if case_of(i) is None]
        items[:] = keep[:at] + [item] + keep[at:]
        self.replaced = len(cases)

    def pytest_report_collectionfinish(self, config: pytest.Config, start_path, items) -> str | None:
        if self.against is None or not self.replaced:
            return None
        return (f"fp4bench ab: the {self.replaced} selected cases run as one A/B comparison: A = {self.against} "
                f"(--fp4-ab-against), B = {sys.executable} (this environment, the candidate)")

    def compare(self, item: AbItem) -> None:
        """Run both sides on the item's cases; raises AbRegression when the gate fails."""
        from fp4bench.ab.judge import judge, outcome
        from fp4bench.ab.report import report, to_json
        from fp4bench.ab.config import AbConfig, Side
        from fp4bench.ab.run import AbRunner
        from fp4bench.gate.rule import RuleSettings
        from fp4bench.plugin.session import session_of

        st = session_of(self.config)
        st.setup()
        opt = self.config.getoption
        rounds = opt("fp4_rounds")
        cfg = AbConfig(sweep=st.sweep, device=str(st.device), replicates=opt("fp4_replicates"), rounds=rounds,
                       max_rounds=max(rounds, AbConfig.max_rounds), time_budget_s=opt("fp4_run_budget"),
                       settings=RuleSettings(floor=st.policy.floor),
                       round_samples=opt("fp4_round_samples"), timeout_s=opt("fp4_case_timeout"),
                       plugins=tuple(opt("fp4_plugin")), cold_l2=opt("fp4_l2") == "cold", seed=opt("fp4_seed"),
                       min_copies=opt("fp4_min_copies"), max_resident=opt("fp4_max_resident"))
        verbose = self.config.get_verbosity() > 0
        runner = AbRunner(Side(item.against, self.env_a), Side(sys.executable), cfg,
                          progress=self._echo if verbose else (lambda line: None))
        t0, last = clock.now(), [clock.now()]
        interval = opt("fp4_progress")

        def on_pair(i: int, n: int, pair) -> None:
            from fp4bench.plugin.console import progress_line

            now = clock.now()
            if interval > 0 and now - last[0] >= interval and i < n:
                last[0] = now
                self._echo(progress_line(i, n, now - t0, unit="A/B benchmarks"))

        try:
            run = runner.run(only=set(item.case_ids), on_pair=on_pair)
        except (RuntimeError, ValueError) as exc:  # a side that cannot start or list the sweep
            raise AbRegression(f"fp4bench ab: {exc}", f"fp4bench ab: {exc}") from None
        result = judge(run, st.policy)
        code, summary = outcome(run, result)
        self.text, self.failed = report(run, result), code != 0
        path = opt("fp4_verdict_json")
        if path:
            from fp4bench.gate.verdict_json import dumps
            from fp4bench.outputs import write_document  # the path was checked before the run

            self._written(lambda: write_document(path, dumps(to_json(run, result))), "--fp4-verdict-json")
        from fp4bench.report.machine import verdict_markdown, write_step_summary

        self._written(lambda: write_step_summary(verdict_markdown(result, baseline=f"side A: {item.against}")),
                      "$GITHUB_STEP_SUMMARY")
        if self.failed:
            raise AbRegression(self.text, summary)

    def _written(self, write, option: str) -> None:
        """``write()``; a write that fails is one line naming the file and the run is incomplete
        (exit 3), never a failed A/B test (exit 1 means a regression)."""
        from fp4bench.outputs import WriteError

        try:
            write()
        except WriteError as exc:
            from fp4bench.plugin.session import session_of

            session_of(self.config).save_error = f"fp4bench: {option}: {exc}; not written (run incomplete)"

    def _echo(self, line: str) -> None:
        """A line on the terminal from inside the running test (past output capture)."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if tr is None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.ensure_newline()
                tr.write_line(line)
        else:
            tr.write_line(line)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if self.text is None or self.failed:
            return  # a failed comparison's table is its test's failure text: printed once
        terminalreporter.section(f"fp4bench ab: this environment (B) vs {self.against} (A)")
        terminalreporter.write_line(self.text)
        path = config.getoption("fp4_verdict_json")
        if path:
            terminalreporter.write_line(f"fp4bench: A/B verdict JSON written to {path}")
