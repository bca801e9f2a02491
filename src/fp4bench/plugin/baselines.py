"""The files of a pytest run, settled before any test runs: the baselines it is judged against
and the candidate file it is saved as.

``activate`` picks and reads the baseline files (a wrong GPU, L2 mode or timer is a usage error
now, not a failed test later) and hands the lead file to pytest-benchmark's own compare;
``route_json`` reserves the candidate's name (``--fp4-save-baseline``) and has pytest-benchmark
write its JSON beside it. ``st`` is the run's ``plugin.session.Fp4Session``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fp4bench.gate.baseline import BaselineError, load_baseline

from fp4bench.gate.compatibility import check_compatible, check_same_measurement
from fp4bench.gate.choice import BaselineFile, Baselines
from fp4bench.gate.store import candidate_path, partial_path, reserve_path, select_baseline, select_baselines
from fp4bench.gate.unit import require_same_unit
from fp4bench.plugin import benchmark


def activate(st: Any, explicit: str | None) -> None:
    """Resolve and validate the baseline files: ``--fp4-baseline-file FILE`` alone; with
    ``--fp4-same-unit`` the one file ``select_baseline`` picks; else the GPU model's
    ``approved.json`` and the unit file of each GPU of the run (``gate.store.select_baselines``;
    which file judges which benchmark: ``gate.choice``). The controller of a merged run has no
    fingerprint of its own yet: each worker checks the GPU model and how it measures against the
    files before its first case."""
    st.setup()
    opt = st.config.getoption
    if st.policy is None:
        st.policy = st.gate_policy()
    try:
        if explicit:
            files = Baselines(BaselineFile(Path(explicit), load_baseline(explicit)))
        elif opt("fp4_same_unit"):
            path = select_baseline(opt("fp4_baselines"), st.fingerprint)
            files = Baselines(BaselineFile(path, load_baseline(path)))
        else:
            files = select_baselines(opt("fp4_baselines"), st.fingerprint, st.gpus)
        st.baselines, st.baseline, st.baseline_path = files, files.lead.baseline, files.lead.path
        if not st.merged:
            st.fingerprint_changes = check_compatible(st.baseline.fingerprint, st.fingerprint)
            for f in files.files:
                check_compatible(f.baseline.fingerprint, st.fingerprint)
                check_same_measurement(f.baseline.sweep, st.measurement())
            if opt("fp4_same_unit"):
                require_same_unit(st.baseline.fingerprint, st.fingerprint)
    except BaselineError as exc:
        raise pytest.UsageError(f"fp4bench baseline: {exc}") from None
    compare = opt("benchmark_compare", default=None)
    if compare and not st.merged and not hasattr(st.config, "workerinput"):  # off under xdist
        # pytest-benchmark's own compare (its table, --benchmark-compare-fail) reads the same
        # baseline; it reads only its own format, so a slim file is handed over as such a file
        if st.baseline.slim:
            benchmark.compare_against(st.config, benchmark.slim_copy(st.config, st.baseline))
        elif compare is True:
            benchmark.compare_against(st.config, st.baseline_path)


def route_json(st: Any, save: str) -> None:
    """``--fp4-save-baseline``: pytest-benchmark writes its JSON (raw samples) where we say."""
    st.setup()
    # the final name is reserved now (unique, never an existing file); pytest-benchmark writes
    # beside it and publish() moves the finished file onto it in one os.replace
    path = Path(candidate_path(st.config.getoption("fp4_baselines"), st.fingerprint.gpu_slug)) \
        if save == "auto" else reserve_path(save)
    benchmark.show_as(st.config, partial_path(path), path)
    if not benchmark.json_to(st.config, partial_path(path)):
        st.copy_to = path  # the user's --benchmark-json stays; the candidate is written beside it (json_section)
    st.json_path = path
