"""Fake ``flashinfer.utils._get_cache_buf``: the shared workspace buffer."""

import torch

_BUFS: dict = {}


def _get_cache_buf(name: str, nbytes: int, device: torch.device) -> torch.Tensor:
    key = (name, str(device))
    if key not in _BUFS:
        _BUFS[key] = torch.empty(1024, dtype=torch.uint8, device=device)  # the fake needs no workspace
    return _BUFS[key]
