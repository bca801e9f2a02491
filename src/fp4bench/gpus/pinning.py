"""One pytest-xdist worker per GPU, each pinned to its GPU by UUID before its CUDA starts.

The controller reads the visible GPUs from NVML (``devices.visible_gpus``: no CUDA context) and
starts worker *i* as the execnet gateway ``popen//env:CUDA_VISIBLE_DEVICES=<UUID of GPU i>``
(``tx_spec``). execnet sets a spec's ``env:`` variables in the new interpreter before it runs
anything else (execnet, multi.py, ``Group.makegateway``), so no import in the worker can reach
CUDA before the pin, and the worker's CUDA sees exactly one GPU, as ``cuda:0``. The worker also
receives its GPU in ``workerinput`` (``GPU_KEY``) and checks the pin in its first configure hook
(``check_pinned``). pytest-xdist starts a worker that replaces a crashed one from the same spec
(pytest-xdist, dsession.py, ``DSession._clone_node``), so it gets the same GPU: two live workers
never share one.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from fp4bench.gpus.devices import Gpu

ENV = "CUDA_VISIBLE_DEVICES"
#: ``workerinput`` keys: the worker's GPU UUID, and every GPU of the run in slot order
GPU_KEY = "fp4bench_gpu"
GPUS_KEY = "fp4bench_gpus"


class PinError(ValueError):
    """The run cannot place one worker per GPU (the text is the one-line usage error)."""


def worker_gpus(workers: int, gpus: Sequence[Gpu], asked: str | None = None) -> list[Gpu]:
    """The GPUs of ``workers`` workers, one each: the first ``workers`` visible GPUs. ``asked``:
    the option as given, for the messages (default ``-n <workers>``)."""
    asked = asked or f"-n {workers}"
    if not gpus:
        raise PinError(f"fp4bench: {asked}: this run has fp4bench benchmark cases, and each worker needs "
                       f"a GPU of its own, but 0 GPUs are visible ({_mask()}); run it without -n")
    if workers > len(gpus):
        raise PinError(f"fp4bench: {asked}: {len(gpus)} GPU{'s are' if len(gpus) > 1 else ' is'} visible "
                       f"({_mask()}) and each benchmark worker needs a GPU of its own: use -n {len(gpus)} or fewer, "
                       "or -n auto (one worker per visible GPU)")
    chosen = list(gpus[:workers])
    names = sorted({g.name for g in chosen})
    if len(names) > 1:
        raise PinError(f"fp4bench: {asked}: the GPUs are of {len(names)} models ({', '.join(names)}); a run "
                       "is gated against one model's baseline: select one model with CUDA_VISIBLE_DEVICES")
    return chosen


def _mask() -> str:
    seen = os.environ.get(ENV)
    return "CUDA_VISIBLE_DEVICES unset" if seen is None else f"CUDA_VISIBLE_DEVICES={seen!r}"


def tx_spec(gpu: Gpu) -> str:
    """The execnet spec of the worker of ``gpu``."""
    if "//" in gpu.uuid or "=" in gpu.uuid:
        raise PinError(f"fp4bench: GPU UUID {gpu.uuid!r} cannot be passed in an execnet spec")
    return f"popen//env:{ENV}={gpu.uuid}"


def gpu_of(spec: Any) -> str | None:
    """The GPU UUID an execnet spec pins its worker to (None: not one of ``tx_spec``'s)."""
    env = getattr(spec, "env", None) or {}
    return env.get(ENV)


def check_pinned(uuid: str) -> None:
    """In the worker, before anything touches CUDA: the process sees ``uuid`` only. ``PinError``
    when the pin is not in place or came too late (CUDA already initialized under another mask)."""
    seen = os.environ.get(ENV)
    if seen is None:
        os.environ[ENV] = seen = uuid
    if seen != uuid:
        raise PinError(f"fp4bench: this worker was assigned GPU {uuid} but runs with {ENV}={seen!r}")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise PinError(f"fp4bench: CUDA was initialized in this worker before it was pinned to GPU {uuid}: "
                       "a plugin or conftest touched torch.cuda at import")
