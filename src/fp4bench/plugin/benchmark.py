"""pytest-benchmark's internal objects, reached from this module only.

fp4bench times its cases itself and hands the samples to pytest-benchmark, whose stats, JSON and
``--benchmark-compare`` then work on GPU seconds per call. pytest-benchmark has no public API for
that, nor for the few other things the plugin does with it; every use of its private or
undocumented objects is here, each naming the pytest-benchmark source it relies on (5.2 and 5.3,
the versions fp4bench allows), so an upgrade that changes one of them is met in this module:

* the ``benchmark`` fixture (``BenchmarkFixture``): samples put into its stats, the fixture
  marked as used, whether it is disabled, its stats as a JSON entry;
* the run's ``BenchmarkSession`` (``config._benchmarksession``);
* the options it reads when it writes and compares, set by fp4bench: where its JSON goes, the
  file it compares against, what a pytest-xdist worker writes;
* its results file: the header its hooks make, ``Stats`` over a slim baseline's samples,
  ``safe_dumps``.

Its public hooks (``pytest_benchmark_update_json``, ``pytest_benchmark_group_stats``) are
implemented where they belong (``hooks``, ``compat``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import pytest_benchmark
from pytest_benchmark.stats import Stats
from pytest_benchmark.utils import safe_dumps

#: pytest-benchmark's version as (major, minor)
VERSION = tuple(int(x) for x in pytest_benchmark.__version__.split(".")[:2])


# -- the benchmark fixture -----------------------------------------------------------------------
def claim(benchmark: Any) -> None:
    """fp4bench owns this test's fixture whatever the outcome (skip, failed check,
    ``--benchmark-disable``): without a mode set, pytest-benchmark warns "Benchmark fixture was
    not used at all" (pytest-benchmark, fixture.py, ``BenchmarkFixture._cleanup``)."""
    benchmark._mode = "fp4bench"


def record_in_benchmark(benchmark: Any, result: Any) -> None:
    """Hand the samples of ``result`` (a ``measure.timing.TimingResult``) to pytest-benchmark so
    its stats, JSON and ``--benchmark-compare-fail`` all operate on GPU seconds per call.

    pytest-benchmark has no public API for externally timed samples; ``_make_stats`` +
    ``update`` is the "sample injection" technique (pytest-benchmark, fixture.py,
    ``BenchmarkFixture._make_stats``; stats.py, ``Metadata.update``). The internals are checked to
    exist so a pytest-benchmark upgrade fails loudly rather than silently.
    """
    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None:
        raise RuntimeError("this pytest-benchmark version has no BenchmarkFixture._make_stats; pin <5.4")
    stats_obj = getattr(benchmark, "stats", None)
    if stats_obj is None:
        stats_obj = make_stats(1)
    else:  # re-measured (the plugin's confirm step): replace the samples, keep one JSON entry
        stats_obj.stats = type(stats_obj.stats)()
    # mark the fixture used: without this pytest-benchmark warns "Benchmark fixture was not used
    # at all in this test!" on every fp4bench test, and a later benchmark(...) call would add a
    # second entry instead of raising FixtureAlreadyUsed (pytest-benchmark, fixture.py,
    # ``BenchmarkFixture.__call__``)
    benchmark._mode = "fp4bench.record_in_benchmark"
    for s in result.samples_s:
        stats_obj.update(s)


def name_of(benchmark: Any, node: Any) -> str:
    """The benchmark's full name in pytest-benchmark's JSON: the test's node id
    (pytest-benchmark, fixture.py, ``BenchmarkFixture.__init__``: ``fullname``)."""
    return benchmark.fullname if hasattr(benchmark, "fullname") else node.nodeid


def times_cases(config: pytest.Config, benchmark: Any) -> bool:
    """Whether this run times its cases: not with ``--benchmark-disable``. pytest-benchmark
    also switches itself off in a pytest-xdist worker (pytest-benchmark, session.py,
    ``BenchmarkSession.__init__``: ``xdist_warning`` sets ``disabled``); fp4bench times its
    cases itself, so a worker times them anyway and the controller writes the results file
    (``fp4bench.plugin.merge``)."""
    if hasattr(config, "workerinput"):
        opt = config.getoption
        return not (opt("benchmark_disable", default=False) and not opt("benchmark_enable", default=False))
    return not getattr(benchmark, "disabled", False)


def fixture_of(item: Any) -> Any:
    """The ``benchmark`` fixture a finished test used, or None."""
    return getattr(item, "funcargs", {}).get("benchmark")


def extra_info_of(item: Any) -> dict:
    """A copy of the ``extra_info`` a test recorded in its fixture (``{}`` without one)."""
    return dict(getattr(fixture_of(item), "extra_info", {}) or {})


def plain_params(entry: dict) -> dict:
    """A JSON entry with its ``fp4_case`` parameter as the case's id: JSON data, not
    pytest-benchmark's ``"UNSERIALIZABLE[...]"`` text (pytest-benchmark, stats.py,
    ``Metadata.as_dict``)."""
    params = entry.get("params")
    if isinstance(params, dict) and hasattr(params.get("fp4_case"), "id"):
        entry["params"] = {**params, "fp4_case": params["fp4_case"].id}
    return entry


def entry_of(item: Any) -> dict | None:
    """The test's pytest-benchmark JSON entry as pytest-benchmark writes it (pytest-benchmark,
    stats.py, ``Metadata.as_dict``), or None when nothing was timed."""
    stats = getattr(fixture_of(item), "stats", None)
    if stats is None:
        return None
    return plain_params(stats.as_dict(include_data=True))


# -- its session and options ---------------------------------------------------------------------
def no_xdist_warning(config: pytest.Config) -> None:
    """pytest-benchmark would warn "Benchmarks are automatically disabled because xdist plugin is
    active" (pytest-benchmark, session.py, ``BenchmarkSession.note_xdist_benchmark`` /
    ``pytest_unconfigure``): not so for fp4bench's cases, which a worker times itself."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is not None:
        bs.xdist_warning = False


def keep_raw_samples(config: pytest.Config) -> None:
    """``--benchmark-autosave`` files carry raw samples, so the gate can read them
    (pytest-benchmark, session.py, ``BenchmarkSession.handle_saving``: ``save_data``)."""
    if hasattr(config.option, "benchmark_save_data"):
        config.option.benchmark_save_data = True


def write_nothing(config: pytest.Config) -> None:
    """A pytest-xdist worker's pytest-benchmark writes and compares nothing: its controller does.
    Set before pytest-benchmark reads the options (pytest-benchmark, plugin.py,
    ``pytest_configure`` is ``trylast``)."""
    for dest in ("benchmark_json", "benchmark_save", "benchmark_compare_fail"):
        if hasattr(config.option, dest):
            setattr(config.option, dest, None)
    for dest in ("benchmark_autosave", "benchmark_compare"):
        if hasattr(config.option, dest):
            setattr(config.option, dest, False)


def compare_against(config: pytest.Config, path: Path) -> None:
    """pytest-benchmark's own compare (its table, ``--benchmark-compare-fail``) reads ``path``."""
    config.option.benchmark_compare = str(path)


#: paths pytest-benchmark is given that the user never sees, and the user's path each stands for
_SHOWN = pytest.StashKey[dict]()


def show_as(config: pytest.Config, internal: Path, user: Path) -> None:
    """pytest-benchmark reads or writes ``internal`` (a temporary copy of a slim baseline, the
    ``.partial-<pid>`` file a candidate is written through) for the user's ``user``: the lines it
    logs name ``user`` (``user_paths``)."""
    config.stash.setdefault(_SHOWN, {})[str(internal)] = str(user)


def user_paths(config: pytest.Config, session: Any = None) -> None:
    """The lines pytest-benchmark's session logs name the user's files, not the internal ones
    of ``show_as`` ("Comparing against benchmarks from: <path>": pytest-benchmark, session.py,
    ``BenchmarkSession.handle_loading``; "Wrote benchmark data in: <path>": ``save_json``) and its
    table's compared rows. Wraps its logger's ``info`` once; ``session``: the ``BenchmarkSession``
    when a hook hands it over before ``config`` holds it."""
    bs = session or getattr(config, "_benchmarksession", None)
    shown_as = config.stash.get(_SHOWN, {})
    compared = getattr(bs, "compared_mapping", None)
    if compared:  # its own table labels the compared rows with the file's path (session.py, ``display``)
        bs.compared_mapping = {Path(shown_as.get(str(p), str(p))): rows for p, rows in compared.items()}
    logger = getattr(bs, "logger", None)
    if logger is None or getattr(logger, "fp4bench_paths", False):
        return
    info = logger.info

    def shown(text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, str):
            for internal, user in config.stash.get(_SHOWN, {}).items():
                text = text.replace(internal, user)
        return info(text, *args, **kwargs)

    logger.info = shown
    logger.fp4bench_paths = True


def json_to(config: pytest.Config, part: Path) -> bool:
    """pytest-benchmark writes its JSON to ``part`` (a path from 5.3, an open file before:
    pytest-benchmark, plugin.py, ``--benchmark-json``'s type), unless the user gave
    ``--benchmark-json``: then False, and that file stays theirs."""
    if config.getoption("benchmark_json", default=None) is not None:
        return False
    if VERSION >= (5, 3):
        config.option.benchmark_json = part
    else:
        from fp4bench.outputs import open_for_library

        config.option.benchmark_json = open_for_library(part)
    return True


# -- its results file ----------------------------------------------------------------------------
def _machine_info(config: pytest.Config) -> dict:
    hook = config.hook
    machine = hook.pytest_benchmark_generate_machine_info(config=config)
    hook.pytest_benchmark_update_machine_info(config=config, machine_info=machine)
    return machine


def results_json(config: pytest.Config, entries: list[dict]) -> dict[str, Any]:
    """``entries`` as pytest-benchmark's results file, with what every
    ``pytest_benchmark_update_json`` hook adds (fp4bench's section among them), as
    pytest-benchmark makes it (pytest-benchmark, session.py, ``BenchmarkSession.handle_saving``;
    plugin.py, ``pytest_benchmark_generate_json``)."""
    hook = config.hook
    machine = _machine_info(config)
    commit = hook.pytest_benchmark_generate_commit_info(config=config)
    hook.pytest_benchmark_update_commit_info(config=config, commit_info=commit)
    out = {"machine_info": machine, "commit_info": commit, "benchmarks": entries,
           "datetime": datetime.now(timezone.utc).isoformat(), "version": pytest_benchmark.__version__}
    hook.pytest_benchmark_update_json(config=config, benchmarks=[], output_json=out)
    return out


def write_results(config: pytest.Config, entries: list[dict]) -> None:
    """``results_json(config, entries)`` to ``--benchmark-json``'s file (nothing without one),
    written as pytest-benchmark writes it (pytest-benchmark, session.py,
    ``BenchmarkSession.save_json``); before 5.3 pytest-benchmark opened that file itself."""
    target = config.getoption("benchmark_json", default=None)
    if target is None:
        return
    text = safe_dumps(results_json(config, entries), ensure_ascii=True, indent=4).encode()
    if hasattr(target, "write"):
        target.write(text)
        target.flush()
    else:
        from fp4bench.outputs import write_atomic

        write_atomic(target, text)


def guard_save(config: pytest.Config, on_error: Any) -> None:
    """pytest-benchmark writes its results file itself (session.py, ``BenchmarkSession.save_json``,
    an ``open(..., "wb")``): a write that fails there (full disk, file-size limit) calls
    ``on_error(exc)`` instead of ending the session in a traceback, so the caller can remove the
    half-written file and say which file was not written."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or getattr(session, "_fp4_guarded", False):
        return
    save = session.save_json

    def guarded(output_json: dict) -> None:
        try:
            save(output_json)
        except OSError as exc:
            on_error(exc)

    session.save_json, session._fp4_guarded = guarded, True


def slim_copy(config: pytest.Config, baseline: Any) -> Path:
    """A slim ``baseline`` (``gate.baseline.Baseline``) as a temporary pytest-benchmark results
    file, removed at exit: pytest-benchmark's compare reads only its own format. Each
    benchmark's stats are pytest-benchmark's own over the recorded samples (pytest-benchmark,
    stats.py, ``Stats``)."""
    benches = []
    for name, rec in sorted(baseline.benchmarks.items()):
        stats = Stats()
        for x in rec.samples:
            stats.update(x)
        benches.append({"group": None, "name": rec.name, "fullname": name, "params": None, "param": None,
                        "extra_info": rec.extra_info, "options": {},
                        "stats": {**stats.as_dict(), "iterations": 1, "data": list(rec.samples)}})
    # this machine's machine_info: pytest-benchmark warns (a 2,000-character line) when the
    # compared file's differs, and a slim file keeps none; the fp4bench fingerprint, checked
    # and reported in the verdict, is what says which machine the baseline is from
    machine = _machine_info(config)
    # the baseline's own path under a temporary folder (its log names the real file: show_as)
    folder = Path(tempfile.mkdtemp(prefix="fp4bench-slim-copy-"))
    real = Path(baseline.source).resolve()
    tmp = folder.joinpath(*real.parts[1:])
    tmp.parent.mkdir(parents=True, exist_ok=True)
    from fp4bench.outputs import write_atomic

    write_atomic(tmp, json.dumps({"machine_info": machine, "commit_info": {}, "benchmarks": benches, "datetime": "",
                               "version": pytest_benchmark.__version__}))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    show_as(config, tmp, real)
    return tmp


def plain_entries(output_json: dict[str, Any]) -> None:
    """Every entry of a results file pytest-benchmark is about to write, with plain parameters
    (``plain_params``)."""
    for bench in output_json.get("benchmarks", []):
        plain_params(bench)
