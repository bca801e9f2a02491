"""Fingerprint of the GPU and software stack a benchmark ran on.

Why: a baseline is only comparable with a run on the same GPU *model* (``MUST_MATCH``);
everything else in the stack (driver, CUDA, torch, FlashInfer, sgl_kernel, cuBLASLt) is what a
regression gate is *for* — it may differ and is shown in the report as "what changed".

Collecting a fingerprint must never import the kernel libraries: ``sgl_kernel`` can fail to import
or poison the CUDA context on the wrong GPU
(e.g. FlashInfer's FP4 quantize on SM90 returns unwritten memory), so versions come from
``importlib.metadata`` (distribution metadata only). NVML (``pynvml``, through ``gpus.nvml``) is
optional: without it, or without a driver, the NVML fields are ``None``; the GPU is opened by its
UUID (``gpus.devices.device_uuid``), so under ``CUDA_VISIBLE_DEVICES`` they are the timed GPU's.
A CPU-only machine yields ``gpu_name="cpu"``.
"""

from __future__ import annotations

import ctypes
import platform
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from fp4bench.backends.builtin import _choice_env as choice_env
from fp4bench.backends.builtin import _numerics_env as numerics_env
from fp4bench.gpus import nvml
from fp4bench.gpus.devices import device_uuid

#: Keys that must be equal between a baseline and the current run (the GPU model).
MUST_MATCH: tuple[str, ...] = ("gpu_slug", "compute_capability")

# Distribution names, tried in order (importlib.metadata looks at dist names, not import names).
_DISTS: dict[str, tuple[str, ...]] = {
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "sgl_kernel": ("sgl-kernel", "sgl_kernel"),
    "cublas_wheel": ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"),
}


def gpu_slug(name: str) -> str:
    """Filesystem-safe GPU model name: ``"NVIDIA H200"`` -> ``"nvidia-h200"``."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"cannot make a GPU slug from name {name!r}")
    return slug


@dataclass(frozen=True)
class Fingerprint:
    """What ran the benchmarks. ``None`` means "not obtainable here", never a guess."""

    gpu_name: str
    gpu_slug: str
    compute_capability: str | None = None  # "9.0", "10.0"; None on CPU
    sm_count: int | None = None
    memory_gib: float | None = None
    l2_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None  # torch.version.cuda: the CUDA torch was built with
    torch: str | None = None
    flashinfer: str | None = None
    sgl_kernel: str | None = None
    cublaslt: str | None = None
    python: str | None = None
    power_limit_w: float | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    #: the physical GPU ("GPU-…"): not gated, but a different unit of the same model explains
    #: shifts of a few % on µs-scale kernels (two ~9 µs kernels +3.5–4.2 % between two
    #: H200 machines, docs/results-h200.md), so the report shows it under "what changed"
    gpu_uuid: str | None = None
    #: FlashInfer's NVFP4-quantization environment variables that are set ("K=V, ..."; None: none
    #: is): they change the rounding of NVFP4 activations, so a difference is a stack change
    flashinfer_numerics_env: str | None = None
    #: what decides FlashInfer's own choices (``backends.builtin._choice_env``): the nvcc FlashInfer
    #: reads its CUDA version from ("13.0 (V13.0.88)"), cuDNN (torch's, e.g. 91500) and
    #: cudnn-frontend, the prebuilt cubin / JIT-cache packages, the settings that change picks
    #: ("K=V, ...") and the tuning files they name ("name:sha12, ...")
    nvcc: str | None = None
    cudnn: int | None = None
    cudnn_frontend: str | None = None
    flashinfer_cubin: str | None = None
    flashinfer_jit_cache: str | None = None
    flashinfer_pick_env: str | None = None
    flashinfer_tuning_files: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Fingerprint":
        """Inverse of ``to_dict``; unknown keys (from newer writers) are ignored."""
        if not isinstance(data, dict):
            raise ValueError(f"fingerprint must be a JSON object, got {type(data).__name__}")
        name = data.get("gpu_name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"fingerprint has no gpu_name (got {name!r})")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        # The slug names the folder a baseline is stored in and the model it is compared with,
        # so it is derived from the GPU name, never taken on trust: a recorded slug that differs
        # (hand-edited, or a B200 file relabelled "nvidia-h200", or "../../x") is rejected.
        derived = gpu_slug(name)
        recorded = kwargs.get("gpu_slug")
        if recorded is not None and recorded != derived:
            raise ValueError(f"gpu_slug {recorded!r} does not match gpu_name {name!r} (its slug is "
                             f"{derived!r}); the file was edited or mislabelled")
        kwargs["gpu_slug"] = derived
        cc = kwargs.get("compute_capability")
        if cc is not None:
            kwargs["compute_capability"] = str(cc)
        return cls(**kwargs)

    @property
    def model(self) -> str:
        """The must-match identity in words, for error messages."""
        cc = self.compute_capability or "n/a"
        return f"{self.gpu_name} ({self.gpu_slug}, compute capability {cc})"

    def same_model(self, other: "Fingerprint") -> bool:
        return all(getattr(self, k) == getattr(other, k) for k in MUST_MATCH)

    def differences(self, other: "Fingerprint") -> list[tuple[str, Any, Any]]:
        """(key, self value, other value) for every differing non-must-match key.

        ``gpu_uuid`` counts only when both sides recorded it (older baselines did not)."""
        skip = set(MUST_MATCH) | {"gpu_name"}
        out = []
        for f in fields(self):
            old, new = getattr(self, f.name), getattr(other, f.name)
            if f.name in skip or old == new or (f.name == "gpu_uuid" and (old is None or new is None)):
                continue
            out.append((f.name, old, new))
        return out


def parse_device(text: str, option: str) -> Any:
    """``torch.device(text)``; a bad name is a ``ValueError`` naming the option it came from."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{option}: {text!r} is not a torch device (e.g. cpu, cuda, cuda:1): {exc}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{option}: {text!r}: fp4bench runs on cpu or cuda devices, not {dev.type}")
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (dev.index or 0) >= n:
            raise ValueError(f"{option}: {text!r}: this machine has {n} CUDA device(s)")
    return dev


def _loaded_cublaslt_version() -> str | None:
    """Version of the libcublasLt this process has loaded (torch links it), via its own API.

    Reads /proc/self/maps (Linux) so we never load a *different* copy than torch uses.
    ``cublasLtGetVersion`` encodes major*10000 + minor*100 + patch.
    """
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcublasLt" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            v = int(lib.cublasLtGetVersion())
        except (OSError, AttributeError):
            continue
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return None


def _nvml_info(uuid: str | None) -> dict[str, Any]:
    """Driver, and the enforced power limit and max clocks of the GPU with this UUID, from NVML;
    {} when NVML is unusable, no GPU fields when the UUID is unknown (never another GPU's)."""
    out: dict[str, Any] = {}
    with nvml.session() as lib:
        if lib is None:
            return out
        try:
            out["driver"] = nvml.text(lib.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        handle = nvml.handle(lib, uuid) if uuid is not None else None
        if handle is None:
            return out
        for key, call in (
            ("power_limit_w", lambda: lib.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),
            ("sm_clock_max_mhz", lambda: int(lib.nvmlDeviceGetMaxClockInfo(handle, lib.NVML_CLOCK_SM))),
            ("mem_clock_max_mhz", lambda: int(lib.nvmlDeviceGetMaxClockInfo(handle, lib.NVML_CLOCK_MEM))),
        ):
            try:
                out[key] = call()
            except Exception:  # not supported on this GPU / vGPU / MIG
                pass
    return out


def _driver_from_proc() -> str | None:
    """Kernel-module version, for when NVML is not installed."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def collect_fingerprint(device: Any = None) -> Fingerprint:
    """Fingerprint of ``device`` (default: current CUDA device, else the CPU)."""
    import torch  # lazy: `fp4bench compare` never needs torch

    from fp4bench.backends.builtin._gating import dist_version  # imports torch too

    common = dict(
        cuda=torch.version.cuda,
        torch=torch.__version__,
        flashinfer=dist_version(*_DISTS["flashinfer"]),
        sgl_kernel=dist_version(*_DISTS["sgl_kernel"]),
        python=platform.python_version(),
        flashinfer_numerics_env=numerics_env.describe(numerics_env.set_vars()),
        nvcc=choice_env.nvcc_version(),
        cudnn=choice_env.cudnn_version(),
        cudnn_frontend=dist_version("nvidia-cudnn-frontend"),
        flashinfer_cubin=dist_version("flashinfer-cubin"),
        flashinfer_jit_cache=dist_version("flashinfer-jit-cache"),
        flashinfer_pick_env=choice_env.pick_settings(),
        flashinfer_tuning_files=choice_env.tuning_files(),
    )
    dev = torch.device(device) if device is not None else None
    if dev is None:
        dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if dev.type == "cpu":
        return Fingerprint(gpu_name="cpu", gpu_slug="cpu", **common)
    if dev.type != "cuda":
        raise ValueError(f"collect_fingerprint supports cpu and cuda devices, got {dev}")
    if not torch.cuda.is_available():
        raise ValueError(f"fingerprint of {dev} requested but CUDA is not available here")

    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = device_uuid(torch.device("cuda", index))
    found = _nvml_info(uuid)
    l2 = getattr(props, "L2_cache_size", None)
    return Fingerprint(
        gpu_name=props.name,
        gpu_slug=gpu_slug(props.name),
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=int(props.multi_processor_count),
        memory_gib=round(props.total_memory / 2**30, 1),
        l2_bytes=int(l2) if l2 else None,
        driver=found.get("driver") or _driver_from_proc(),
        cublaslt=_loaded_cublaslt_version() or dist_version(*_DISTS["cublas_wheel"]),
        power_limit_w=found.get("power_limit_w"),
        sm_clock_max_mhz=found.get("sm_clock_max_mhz"),
        mem_clock_max_mhz=found.get("mem_clock_max_mhz"),
        gpu_uuid=uuid,
        **common,
    )
