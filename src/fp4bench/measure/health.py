"""Is the CUDA context still usable? Some FP4 entry points poison it instead of raising.

A CUDA error such as a device-side assert, an illegal address or a trap is *sticky*: every
later CUDA call in the process fails with it, and only a new process recovers (CUDA Runtime
API, "Error Handling": "sticky errors ... the CUDA context is corrupted; the process must be
terminated and relaunched"). ``context_health`` runs a small torch kernel and checks it;
``looks_sticky`` recognises the error text of such failures in an exception.

Running out of device memory is neither: the allocation that did not fit raises and the context
stays usable. ``out_of_memory`` names that exception, so every front end reports it as a
resource failure of the case, never as a wrong output.
"""

from __future__ import annotations

import torch

#: substrings of CUDA error messages (cudaGetErrorString) that leave the context unusable
STICKY_ERRORS = (
    "device-side assert triggered",
    "illegal memory access",
    "illegal instruction",
    "unspecified launch failure",
    "misaligned address",
    "an illegal",
    "hardware stack error",
)


def looks_sticky(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in STICKY_ERRORS)


def out_of_memory(exc: BaseException) -> bool:
    """A device allocation that did not fit: torch's ``OutOfMemoryError`` (its caching allocator,
    "CUDA out of memory. Tried to allocate ..."), or a library that reports the CUDA runtime's
    ``cudaErrorMemoryAllocation`` ("out of memory") in another exception type."""
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def context_health(device: torch.device) -> str:
    """'' when a 256x256 fp32 matmul on ``device`` runs and is right; else what broke."""
    try:
        g = torch.Generator(device=device).manual_seed(1)
        x = torch.randn(256, 256, device=device, generator=g)
        ok = torch.allclose(x @ x, (x.double() @ x.double()).float(), rtol=1e-3, atol=1e-2)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return "" if ok else "a 256x256 fp32 matmul returned a wrong result"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
