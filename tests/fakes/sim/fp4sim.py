"""pytest plugin (test-only): run ``pytest bench`` on this CPU as if on a Blackwell GPU.

Load with ``-p fp4sim`` with ``tests`` and ``tests/fakes/sim`` on ``PYTHONPATH``. What it
replaces, and nothing else, is what a GPU would provide:

* the device capability (``fp4bench.backends.builtin._gating.device_info``), the CUDA version the
  torch build reports (``torch.version.cuda``), and the nvcc and cuDNN versions the fingerprint
  records (``_choice_env``: the simulated FlashInfer's, ``FP4SIM_NVCC`` / ``FP4SIM_CUDNN``);
* torch's FP4 ``_scaled_mm`` / ``_scaled_mm_v2`` ``out=`` kernels: CPU implementations from
  ``fakes.torch_scaled_mm`` registered under the real aten op names (``fp4sim_ops``);
* the profiler's kernel names (``fp4bench.measure.kernels.kernel_names``): the kernels the fake
  libraries launched during the call;
* ``_gating.probe_import`` imports in this process: the probe exists because a real native
  extension may abort the interpreter that imports it, and the simulated ones (pure Python)
  cannot; a child interpreter importing the fake ``sgl_kernel`` imports torch, seconds a process;
* with ``FP4SIM_CLOCK=sim``, the clock: the session runs on ``clock.SimClock``, so a simulated
  launch (``FP4SIM_CALL_S``) advances it by exactly its simulated device time and what is timed
  is that time alone, whatever the machine's load; nothing is slept;
* a tiny model ``sim-tiny`` (H 256, I 128, 8 experts, top-2, one shared expert: dense GEMMs) so a case takes milliseconds.

``flashinfer`` and ``sgl_kernel`` themselves are the fake packages next to this file; the
adapters import them through their normal code paths. The sweep, CaseRunner, verification,
baseline and gate are fp4bench's own.
"""

from __future__ import annotations

import contextlib
import importlib
import os

import torch

import fp4sim_ops
import fp4sim_world as world
from fp4bench import clock
from fp4bench.backends.builtin import _choice_env, _gating
from fp4bench.measure import kernels as kernel_ids
from fp4bench.models import catalog
from fp4bench.models.moe_model import MoEModel

_SRC = "[estimate] test-only simulated model"
TINY = MoEModel(name="sim-tiny", hidden=256, moe_intermediate=128, num_experts=8, top_k=2, shared_experts=1,
                shared_intermediate=128, moe_layers=1, num_layers=1, native_format="nvfp4",
                sources={f: _SRC for f in ("hidden", "moe_intermediate", "num_experts", "top_k", "shared_experts",
                                           "shared_intermediate", "moe_layers", "num_layers", "native_format")})


def _kernel_names(fn, **_: object) -> list[str]:
    before = len(world.launched())
    fn()
    return sorted(set(world.launched()[before:]))


def simulated_clock() -> contextlib.AbstractContextManager:
    """The clock ``FP4SIM_CLOCK`` names, to be entered: ``sim``, a fresh ``clock.SimClock``;
    unset, the clock in use."""
    which = os.environ.get("FP4SIM_CLOCK")
    if which == "sim":
        return clock.using(clock.SimClock())
    if which:
        raise ValueError(f"FP4SIM_CLOCK={which!r}: use sim, or leave it unset for the real clock")
    return contextlib.nullcontext()


def probe_here(module: str, timeout_s: float = 0.0) -> _gating.ImportProbe:
    """``_gating.probe_import`` in this process: the outcome the child's last line of stderr
    would give."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # what would end the child with a traceback
        return _gating.ImportProbe(False, _gating._last_line(f"{type(exc).__name__}: {exc}"))
    return _gating.ImportProbe(True)


def install(mp) -> None:
    """Apply the simulation (``mp``: a ``pytest.MonkeyPatch``). torch runs on one intra-op thread:
    on a loaded 2-core machine hand-offs between intra-op threads stretched a fake's ~1 ms of CPU
    work to ~40 ms at random, 30x apart between a baseline run and the next."""
    torch.set_num_threads(1)
    mp.setattr(_gating, "device_info", lambda device: world.GPU)
    mp.setattr(torch.version, "cuda", "12.9")
    # the fingerprint reads what the simulated FlashInfer decides by, not this machine's nvcc / cuDNN
    mp.setattr(_choice_env, "nvcc_version", lambda environ=None: f"{world.MM.cuda} (simulated)")
    mp.setattr(_choice_env, "cudnn_version", lambda: world.MM.cudnn)
    mp.setattr(kernel_ids, "kernel_names", _kernel_names)
    mp.setattr(_gating, "probe_import", probe_here)
    mp.setitem(catalog._registry(), TINY.name, TINY)
    fp4sim_ops.register_aten()


def pytest_configure(config) -> None:
    """Installed for the session and undone after it (an in-process run leaves the process as it
    found it: its torch threads, model catalog, patched functions and clock)."""
    mp = __import__("pytest").MonkeyPatch()
    config.add_cleanup(mp.undo)
    config.add_cleanup(lambda threads=torch.get_num_threads(): torch.set_num_threads(threads))
    install(mp)
    session = contextlib.ExitStack()
    config.add_cleanup(session.close)
    session.enter_context(simulated_clock())
