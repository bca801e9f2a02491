"""What decides FlashInfer's own choices on this machine, for the fingerprint (no library import).

* **nvcc**: ``mm_fp4(backend="auto")`` orders its backends by the CUDA version FlashInfer reads
  from ``<cuda_home>/bin/nvcc --version`` (flashinfer/jit/cpp_ext.py ``get_cuda_path``: ``CUDA_HOME``,
  ``CUDA_PATH``, the ``nvcc`` on ``PATH``, ``/usr/local/cuda``; ``get_cuda_version`` falls back to
  torch's CUDA without nvcc), and the same nvcc (or ``FLASHINFER_NVCC``) builds its JIT modules;
* **cuDNN** (the library torch loaded: ``torch.backends.cudnn.version()``) and **cudnn-frontend**
  (``nvidia-cudnn-frontend``): ``auto`` puts cuDNN first on SM100 from cuDNN 9.15 with CUDA 13;
* the **cubin / JIT-cache packages** (``flashinfer-cubin``, ``flashinfer-jit-cache``): prebuilt
  kernels that replace JIT builds;
* the **settings that change picks** (``PICK_ENV_VARS``) and the **tuning files** they name (each
  file by name and the first 12 hex digits of its sha256).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

#: environment variables that change which backend or tactic FlashInfer picks: a tuning cache to
#: load (``FLASHINFER_AUTOTUNER_LOAD_FROM_FILE``, ``FLASHINFER_AUTOTUNE_CACHE_DIR``), distributed
#: tuning (``FLASHINFER_DIST_AWARE_AUTOTUNE``, flashinfer/fused_moe/da_config.py), tactics removed
#: before profiling (``FLASHINFER_TACTICS_BLOCKLIST``, autotuner.py ``AutoTuner.__init__``), the
#: tuner's timer (``FLASHINFER_AUTOTUNE_TIMER``) and the nvcc of the JIT builds (``FLASHINFER_NVCC``)
PICK_ENV_VARS = ("FLASHINFER_AUTOTUNER_LOAD_FROM_FILE", "FLASHINFER_AUTOTUNE_CACHE_DIR",
                 "FLASHINFER_DIST_AWARE_AUTOTUNE", "FLASHINFER_TACTICS_BLOCKLIST", "FLASHINFER_AUTOTUNE_TIMER",
                 "FLASHINFER_NVCC")
#: the variables whose value is a file or folder of tuning data (hashed into ``tuning_files``)
_FILE_VARS = ("FLASHINFER_AUTOTUNE_CACHE_DIR", "FLASHINFER_TACTICS_BLOCKLIST")
CUBIN_DISTS = ("flashinfer-cubin", "flashinfer-jit-cache")


def nvcc_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The nvcc FlashInfer's ``get_cuda_version`` runs, or None when there is none."""
    env = os.environ if environ is None else environ
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home is None:
        found = shutil.which("nvcc", path=env.get("PATH"))
        home = os.path.dirname(os.path.dirname(found)) if found else "/usr/local/cuda"
    path = os.path.join(home, "bin", "nvcc")
    return path if os.path.isfile(path) else None


def nvcc_version(environ: Mapping[str, str] | None = None) -> str | None:
    """``nvcc --version``'s release and build ("13.0 (V13.0.88)"), None without nvcc or output to read."""
    path = nvcc_path(environ)
    if path is None:
        return None
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+), V([\d.]+)", text)
    return f"{m.group(1)} (V{m.group(2)})" if m else None


def cudnn_version() -> int | None:
    """The cuDNN version torch loaded (91500 = 9.15.0), None where it has none."""
    import torch

    try:
        v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # a build without the library
        return None
    return int(v) if v else None


def pick_settings(environ: Mapping[str, str] | None = None) -> str | None:
    """``"K=V, ..."`` of the set ``PICK_ENV_VARS`` (sorted), None when none is set."""
    env = os.environ if environ is None else environ
    return ", ".join(f"{k}={env[k]}" for k in sorted(PICK_ENV_VARS) if k in env) or None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def tuning_files(environ: Mapping[str, str] | None = None) -> str | None:
    """``"name:sha12, ..."`` of the tuning files the settings name (a folder: its ``*.json``), or None."""
    env = os.environ if environ is None else environ
    out = []
    for var in _FILE_VARS:
        value = env.get(var)
        if not value:
            continue
        p = Path(value)
        files = sorted(p.glob("*.json")) if p.is_dir() else [p] if p.is_file() else []
        out += [f"{f.name}:{_digest(f)}" for f in files]
        if not files:
            out.append(f"{p.name}:absent")
    return ", ".join(out) or None
