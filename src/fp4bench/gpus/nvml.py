"""NVML (nvidia-ml-py, imported as ``pynvml``) for the whole package: initialized here, a GPU
opened here by its UUID and never by an index.

Why by UUID: NVML numbers GPUs as the driver sees them, CUDA numbers only the ones
``CUDA_VISIBLE_DEVICES`` leaves visible, so under ``CUDA_VISIBLE_DEVICES=3`` torch's ``cuda:0`` is
NVML's device 3; an index would read another GPU's clocks, power and limits. The UUID of torch's
device comes from ``gpus.devices.device_uuid``.

Two ways in, both guarded (no nvidia-ml-py, no driver, no GPU: nothing is raised):

* :func:`load`: NVML for the rest of the process, initialized once and never shut down; the
  telemetry sampler uses it, since an ``nvmlInit`` per benchmark would cost time in every window.
  The outcome, failure included, is cached.
* :func:`session`: NVML for one short query (the fingerprint, the GPU list, the CLI), shut down
  after it. NVML counts its inits, so a session inside a process that also :func:`load`-ed
  leaves that one open.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

_LOCK = threading.Lock()
_STATE: tuple[Any, str | None] | None = None  # (pynvml module or None, reason when None)

UUID_PREFIXES = ("GPU-", "MIG-")


def check_uuid(uuid: Any) -> str:
    """``uuid`` if it is an NVML UUID (``GPU-…`` or ``MIG-…``); a ``ValueError`` naming it otherwise."""
    if not isinstance(uuid, str) or not uuid.startswith(UUID_PREFIXES) or len(uuid) <= 4:
        raise ValueError(f"an NVML GPU is named by its UUID (GPU-…, MIG-…), got {uuid!r}")
    return uuid


def text(value: Any) -> str:
    """An NVML string (bytes in older nvidia-ml-py releases) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _init() -> tuple[Any | None, str | None]:
    try:
        import pynvml
    except ImportError as exc:
        return None, f"nvidia-ml-py (pynvml) not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError: no driver / no library / no GPU
        return None, f"nvmlInit failed: {exc}"
    return pynvml, None


def load() -> tuple[Any | None, str | None]:
    """``(pynvml, None)`` once NVML is initialized for the process, else ``(None, reason)``."""
    global _STATE
    with _LOCK:
        if _STATE is None:
            _STATE = _init()
        return _STATE


@contextlib.contextmanager
def session() -> Iterator[Any | None]:
    """NVML for the ``with`` body (the pynvml module, or None where NVML is unusable), shut down after."""
    lib, _ = _init()
    try:
        yield lib
    finally:
        if lib is not None:
            try:
                lib.nvmlShutdown()
            except Exception:
                pass


def handle(lib: Any, uuid: str) -> Any:
    """The NVML handle of the GPU with this UUID; None when NVML does not know it."""
    check_uuid(uuid)
    try:
        return lib.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # NVMLError_NotFound, or a MIG/vGPU that refuses the query
        return None


def all_gpus(lib: Any) -> list[tuple[str, str]]:
    """(UUID, name) of every GPU the driver sees, in NVML's order; [] where NVML cannot list them.

    This is the one walk over NVML's indices: it reads each GPU's UUID, the only name of it the
    rest of the package uses."""
    try:
        out = []
        for i in range(lib.nvmlDeviceGetCount()):
            h = lib.nvmlDeviceGetHandleByIndex(i)
            out.append((text(lib.nvmlDeviceGetUUID(h)), text(lib.nvmlDeviceGetName(h))))
        return out
    except Exception:
        return []
