"""A run over several GPUs gated once: what each pytest-xdist worker sends with a finished case,
and how the controller merges it into its own ``Fp4Session``.

Worker side. ``case_data`` is the data of one finished case; it rides on the case's pytest report
as the user property ``KEY`` (a report's ``user_properties`` travel to the controller with it:
pytest-xdist, remote.py, ``WorkerInteractor.pytest_runtest_logreport``; pytest, reports.py,
``_report_to_json``), the moment the case finishes, so a worker that is killed loses only the case
it was running. It holds the samples and every window taken so far, how many windows the test
judged, ``extra_info`` (with the ``gpu_uuid`` that measured it), availability entries, a skip
reason, the results-table row and the benchmark's pytest-benchmark JSON entry; and the worker's
fingerprint, sweep and way of measuring. ``end_data`` is what comes after the tests (the windows of
``--fp4-windows``' later passes, windows that failed, the CUDA context check): it travels in
pytest-xdist's ``workeroutput`` when the worker finishes.

Controller side. ``absorb`` and ``absorb_end`` put that data where a single-process run keeps
what it measured, so the one verdict table, results file, CSV, line log and coverage account are
made by the same code as in a single-process run. ``merged_fingerprint`` is the run's fingerprint:
the workers' fields, with every field they disagree on (``gpu_uuid`` on two or more GPUs) None;
each benchmark's own GPU is its ``extra_info["gpu_uuid"]``. The workers' pytest-benchmark JSON
entries become the run's one results file (``plugin.benchmark.write_results``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from fp4bench.plugin.benchmark import entry_of, extra_info_of

KEY = "fp4bench"


def plain(value: Any) -> Any:
    """``value`` as JSON data (numpy scalars as numbers, anything else unknown as text): what
    execnet can send."""
    def default(o: Any) -> Any:
        item = getattr(o, "item", None)
        if callable(item):
            try:
                return item()
            except (TypeError, ValueError):
                pass
        return str(o)

    return json.loads(json.dumps(value, default=default))


def case_data(st: Any, item: Any, reason: str = "", planned: Sequence[str] | None = None) -> dict[str, Any]:
    """What the controller needs of the finished case ``item`` (worker side)."""
    from fp4bench.gate.baseline import availability_key
    from fp4bench.plugin.console import case_of

    name = item.nodeid
    spec = case_of(item)
    data: dict[str, Any] = {
        "gpu": st.fingerprint.gpu_uuid if st.fingerprint is not None else None,
        "run": {"fingerprint": st.fingerprint.to_dict() if st.fingerprint is not None else None,
                "sweep": st.sweep.to_dict() if st.sweep is not None else None,
                "measurement": st.measurement() if st.runner is not None else {},
                "test_only": st.test_only(),
                "device": st.device.type if st.device is not None else None},
        "reason": reason,
    }
    if spec is not None:
        key = availability_key(spec.backend, spec.problem.id, spec.tactic.label)
        data["availability"] = {key: st.availability[key]} if key in st.availability else {}
    if name in st.skipped:
        data["skipped"] = st.skipped[name]
        data["skipped_backend"] = st.skipped_backend.get(name)
    if name in st.checks:
        data["check"] = st.checks[name]
    data["extra_info"] = extra_info_of(item)  # what a failed check recorded
    if name in st.measured:
        samples, extra = st.measured[name]
        data["extra_info"] = extra
        data["measured"] = {"samples": samples, "extra_info": extra, "windows": st.windows.get(name, [samples]),
                            "judged": st.judged.get(name), "row": st.row_of.get(name), "entry": entry_of(item)}
    if planned is not None:
        data["planned"] = list(planned)
    return plain(data)


def end_data(st: Any) -> dict[str, Any]:
    """What a worker adds at its end (worker side)."""
    return plain({"gpu": st.fingerprint.gpu_uuid if st.fingerprint is not None else None,
                  "windows": {k: w for k, w in st.windows.items() if len(w) > 1},
                  "window_errors": list(st.window_errors), "health": st.health, "interrupted": st.interrupted})


def merged_fingerprint(fingerprints: Sequence[Any]) -> Any:
    """One fingerprint of the workers' (see the module docstring). ``ValueError`` for workers on
    different GPU models."""
    from fp4bench.env import Fingerprint

    first = fingerprints[0]
    for fp in fingerprints[1:]:
        if not first.same_model(fp):
            raise ValueError(f"fp4bench: the workers ran on different GPU models ({first.model}, {fp.model})")
    if len(fingerprints) == 1:
        return first
    own = first.to_dict()
    return Fingerprint.from_dict({k: v if all(fp.to_dict()[k] == v for fp in fingerprints) else None
                                  for k, v in own.items()})


def absorb(st: Any, nodeid: str, data: dict[str, Any]) -> None:
    """Merge one finished case's ``case_data`` into the controller's session ``st``."""
    from fp4bench.env import Fingerprint

    run = data.get("run") or {}
    if run.get("fingerprint"):
        fp = Fingerprint.from_dict(run["fingerprint"])
        st.unit_fingerprints[fp.gpu_uuid] = fp
        st.fingerprint = merged_fingerprint(list(st.unit_fingerprints.values()))
        if not st.ready and run.get("sweep") is not None:
            import torch  # torch.device only: no CUDA call

            from fp4bench.run.sweep import SweepOptions

            st.sweep = SweepOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in run["sweep"].items()})
            st.measured_how = dict(run.get("measurement") or {})
            st.test_only_found = dict(run.get("test_only") or {})
            st.device = torch.device(run.get("device") or "cpu")
            st.ready = True
    st.availability.update(data.get("availability") or {})
    if data.get("skipped") is not None:
        st.skipped[nodeid] = data["skipped"]
        if data.get("skipped_backend"):
            st.skipped_backend[nodeid] = data["skipped_backend"]
    if data.get("check") is not None:
        st.checks[nodeid] = data["check"]
    m = data.get("measured")
    if m:
        st.measured[nodeid] = (list(m["samples"]), dict(m["extra_info"]))
        st.windows[nodeid] = [list(w) for w in m["windows"]]
        if m.get("judged"):
            st.judged[nodeid] = int(m["judged"])
        if m.get("row") is not None:
            st.rows.append(m["row"])
            st.row_of[nodeid] = m["row"]
        if m.get("entry") is not None:
            st.entries[nodeid] = m["entry"]


def absorb_end(st: Any, worker: str, data: dict[str, Any]) -> None:
    """Merge a worker's ``end_data`` (its windows replace the shorter lists sent with its cases)."""
    for name, ws in (data.get("windows") or {}).items():
        if name in st.measured and len(ws) > len(st.windows.get(name, ())):
            st.windows[name] = [list(w) for w in ws]
    st.window_errors.extend(tuple(e) for e in data.get("window_errors") or ())
    health = data.get("health")
    if health:
        where = f"{worker} ({data.get('gpu') or 'no GPU'})"
        st.health = f"{st.health}; {where}: {health}" if st.health else f"{where}: {health}"
    elif health == "" and st.health is None:
        st.health = ""
    if data.get("interrupted"):
        st.interrupted = True


def in_order(st: Any, planned: Sequence[str]) -> None:
    """The merged cases in collection order (they arrive in the order the workers finish them),
    so the tables and the CSV list them as a single-process run would."""
    rank = {name: i for i, name in enumerate(planned)}

    def key(name: str) -> tuple[int, str]:
        return rank.get(name, len(rank)), name

    st.measured = {name: st.measured[name] for name in sorted(st.measured, key=key)}
    st.rows = [st.row_of[name] for name in sorted(st.row_of, key=key)]
