"""A pytest run's settings, read from its ``--fp4-*`` options: the device and runner its cases
are measured with, the gate's ``Policy``, the sweep it runs and the test-only backends that sweep
selects.

The runner is built by ``run.factory`` from a ``run.settings.RunnerSettings``, as a worker
process builds its own (``--fp4-isolate``: the same settings go to the worker as its ``init``).
``st`` is the run's ``plugin.session.Fp4Session``.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fp4bench.backends import registry
from fp4bench.gate.policy import Policy
from fp4bench.measure.timing import TimingConfig
from fp4bench.options.registry import policy_kwargs
from fp4bench.run.factory import case_runner, isolated_runner, open_device
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.sweep import SweepOptions, sweep_options as resolve_sweep
from fp4bench.run.worker.interpreter import interpreter


def set_up(st: Any) -> None:
    """The run's device (``--fp4-device``; the ``--fp4-plugin`` modules loaded first), its
    fingerprint, the runner (in a worker process with ``--fp4-isolate``) and the ``Policy``."""
    opt = st.config.getoption
    st.device, st.fingerprint = open_device(opt("fp4_device"), opt("fp4_plugin"), option="--fp4-device")
    st.unit_fingerprints[st.fingerprint.gpu_uuid] = st.fingerprint
    settings = runner_settings(st.config, st.device)
    st.runner = isolated(st.config, settings) if opt("fp4_isolate") else case_runner(settings, st.device,
                                                                                      st.fingerprint)
    st.policy = gate_policy(st.config)


def runner_settings(config: pytest.Config, device: Any) -> RunnerSettings:
    """How the cases are measured on ``device``: CUDA-graph replays on a GPU, ``perf_counter`` on a
    CPU, for ``--fp4-time-budget`` seconds a case (default 1 on a GPU, 0.3 on a CPU)."""
    opt = config.getoption
    budget = opt("fp4_time_budget")
    if budget is None:
        budget = 1.0 if device.type == "cuda" else 0.3
    timing = TimingConfig(mode="graph" if device.type == "cuda" else "cpu", time_budget_s=budget,
                          target_rel_ci=opt("fp4_target_ci"), min_samples=opt("fp4_min_samples"),
                          max_samples=max(300, opt("fp4_min_samples")), energy_window_s=opt("fp4_energy_window"))
    return RunnerSettings(device=str(device), plugins=tuple(opt("fp4_plugin")), timing=timing,
                          cold_l2=opt("fp4_l2") == "cold", seed=opt("fp4_seed"), min_copies=opt("fp4_min_copies"),
                          replays=opt("fp4_replays"))


def isolated(config: pytest.Config, settings: RunnerSettings) -> Any:
    """The runner of ``settings`` in a worker process run by ``--fp4-python`` (default: this
    interpreter), each case within ``--fp4-case-timeout`` seconds."""
    opt = config.getoption
    try:
        python = interpreter(opt("fp4_python") or sys.executable)
    except ValueError as exc:
        raise pytest.UsageError(f"--fp4-python: {exc}") from None
    try:
        return isolated_runner(settings, python, opt("fp4_case_timeout"))
    except ValueError as exc:
        raise pytest.UsageError(f"--fp4-case-timeout: {exc}") from None


def gate_policy(config: pytest.Config) -> Policy:
    """The gate's ``Policy`` from the ``--fp4-*`` gate options (before any unit adjustment)."""
    return Policy(**policy_kwargs(lambda name: config.getoption("fp4_" + name.replace("-", "_"))))


def sweep_options(st: Any) -> SweepOptions:
    """The sweep to run: options, else the active baseline's sweep, else the defaults. A backend
    no module defines is a ``ValueError`` naming it (and the baseline field it came from)."""
    config = st.config
    base = dict(st.baseline.sweep) if st.baseline is not None and st.baseline.sweep else {}
    source = f"baseline {st.baseline.source}" if base else "the baseline"
    opts = resolve_sweep(lambda name: config.getoption("fp4_" + name), base,
                         on_gpu=st.device.type == "cuda", flag="--fp4-", source=source)
    given = config.getoption("fp4_backends") is not None
    for b in opts.backends or ():
        try:
            registry.get_backend(b)  # raises ValueError naming the unknown backend
        except ValueError as exc:
            raise ValueError(str(exc) if given else f"{source}: recorded sweep field 'backends': {exc}") from None
    return opts


def test_only(st: Any) -> dict[str, str]:
    """The test-only backends this run's sweep selects (``{}`` for a real run); a merged run's
    are its workers'."""
    if st.merged:
        return dict(st.test_only_found)
    if st.sweep is None:
        return {}
    return registry.test_only(st.sweep.backends)
