"""Fingerprint collection on CPU, on a faked CUDA device with a faked NVML, and its round trip."""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import platform
import sys
import types
import uuid
from dataclasses import replace

import pytest
import torch

from fakes.benchjson import B200, H200
from fp4bench import env
from fp4bench.env import Fingerprint, collect_fingerprint, gpu_slug


class _ForbidImport(importlib.abc.MetaPathFinder):
    """Fails the test if anything tries to import the kernel libraries."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("flashinfer", "sgl_kernel"):
            raise AssertionError(f"collect_fingerprint imported {name}")
        return None


@pytest.fixture
def no_kernel_imports(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [_ForbidImport(), *sys.meta_path])
    for mod in ("flashinfer", "sgl_kernel"):
        monkeypatch.delitem(sys.modules, mod, raising=False)


def test_gpu_slug():
    assert gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert gpu_slug("NVIDIA GeForce RTX 5090") == "nvidia-geforce-rtx-5090"
    assert gpu_slug("NVIDIA B200 / (MIG 1g.23gb)") == "nvidia-b200-mig-1g-23gb"
    with pytest.raises(ValueError, match="slug"):
        gpu_slug("///")


def test_cpu_fingerprint(no_kernel_imports):
    fp = collect_fingerprint("cpu")
    assert (fp.gpu_name, fp.gpu_slug, fp.compute_capability) == ("cpu", "cpu", None)
    assert fp.torch == torch.__version__ and fp.python == platform.python_version()
    assert fp.sm_count is None and fp.power_limit_w is None
    assert "flashinfer" not in sys.modules and "sgl_kernel" not in sys.modules


def test_versions_come_from_metadata_without_import(monkeypatch, no_kernel_imports):
    real = importlib.metadata.version

    def fake_version(name):
        return {"flashinfer-python": "0.5.2", "sgl-kernel": "0.3.9"}.get(name) or real(name)

    monkeypatch.setattr(importlib.metadata, "version", fake_version)
    fp = collect_fingerprint("cpu")
    assert fp.flashinfer == "0.5.2" and fp.sgl_kernel == "0.3.9"


def test_dist_version_missing_is_none():
    from fp4bench.backends.builtin._gating import dist_version

    assert dist_version("surely-not-installed-fp4bench-x", "nor-this-one") is None


def _fake_cuda(monkeypatch, uid=None):
    props = types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
        total_memory=150_119_424_000, L2_cache_size=52_428_800, uuid=uid,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    return props


def _fake_nvml(monkeypatch, expect_uuid=None):
    calls = []
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: b"580.95.05"

    def by_uuid(u):
        assert u == expect_uuid
        return "handle"

    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetHandleByIndex = lambda i: "handle"
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    m.nvmlDeviceGetMaxClockInfo = lambda h, c: {1: 1980, 2: 3201}[c]
    monkeypatch.setitem(sys.modules, "pynvml", m)
    return calls


def test_cuda_fingerprint_with_nvml(monkeypatch, no_kernel_imports):
    uid = uuid.UUID("58bb9d3c-7ea4-4ec1-9b2f-111122223333")
    _fake_cuda(monkeypatch, uid)
    calls = _fake_nvml(monkeypatch, expect_uuid=f"GPU-{uid}")
    fp = collect_fingerprint("cuda:0")
    assert fp.gpu_slug == "nvidia-h200" and fp.compute_capability == "9.0"
    assert fp.sm_count == 132 and fp.memory_gib == pytest.approx(139.8) and fp.l2_bytes == 52_428_800
    assert fp.driver == "580.95.05" and fp.power_limit_w == 700.0
    assert (fp.sm_clock_max_mhz, fp.mem_clock_max_mhz) == (1980, 3201)
    assert fp.gpu_uuid == f"GPU-{uid}"
    assert calls == ["init", "shutdown"]


def test_cuda_fingerprint_without_nvml(monkeypatch):
    _fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setattr(env, "_driver_from_proc", lambda: None)
    fp = collect_fingerprint()
    assert fp.gpu_name == "NVIDIA H200"
    assert fp.power_limit_w is None and fp.sm_clock_max_mhz is None and fp.driver is None


def test_nvml_without_driver_is_none(monkeypatch):
    _fake_cuda(monkeypatch)
    m = types.ModuleType("pynvml")

    def boom():
        raise RuntimeError("NVML Shared Library Not Found")

    m.nvmlInit = boom
    monkeypatch.setitem(sys.modules, "pynvml", m)
    assert env._nvml_info("GPU-1234") == {}


def test_unknown_physical_gpu_leaves_nvml_fields_none(monkeypatch):
    """CUDA_VISIBLE_DEVICES renumbers GPUs: without a UUID we must not read another GPU's limits."""
    _fake_cuda(monkeypatch, uid=None)
    _fake_nvml(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    fp = collect_fingerprint("cuda")
    assert fp.power_limit_w is None and fp.driver == "580.95.05"


def test_cuda_requested_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        collect_fingerprint("cuda")
    with pytest.raises(ValueError, match="cpu and cuda"):
        collect_fingerprint("meta")


def test_round_trip_and_forward_compat():
    assert Fingerprint.from_dict(H200.to_dict()) == H200
    d = H200.to_dict() | {"future_key": 1}
    del d["gpu_slug"]
    assert Fingerprint.from_dict(d) == H200
    with pytest.raises(ValueError, match="gpu_name"):
        Fingerprint.from_dict({"driver": "580"})
    with pytest.raises(ValueError, match="JSON object"):
        Fingerprint.from_dict(["NVIDIA H200"])


def test_same_model_and_differences():
    newer = replace(H200, driver="590.2", flashinfer="0.6.0", power_limit_w=600.0)
    assert H200.same_model(newer)
    assert H200.differences(newer) == [
        ("driver", "580.1", "590.2"), ("flashinfer", "0.5.2", "0.6.0"), ("power_limit_w", 700.0, 600.0)
    ]
    assert not H200.same_model(B200)
    assert not H200.same_model(replace(H200, compute_capability="9.1"))


def test_physical_gpu_change_is_shown_only_when_both_sides_recorded_it():
    a, b = replace(H200, gpu_uuid="GPU-aaaa"), replace(H200, gpu_uuid="GPU-bbbb")
    assert a.differences(b) == [("gpu_uuid", "GPU-aaaa", "GPU-bbbb")]
    assert a.same_model(b)  # another unit of the same model is comparable, not refused
    assert H200.differences(b) == [] and a.differences(H200) == []  # older baselines have no UUID


def _fake_nvcc(tmp_path, release: str) -> str:
    """A CUDA home whose ``bin/nvcc --version`` prints ``release`` as nvcc does."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.88'\n")
    nvcc.chmod(0o755)
    return str(home)


def test_the_fingerprint_names_what_decides_flashinfers_choices(monkeypatch, tmp_path, no_kernel_imports):
    """nvcc (where FlashInfer looks: CUDA_HOME), cudnn-frontend and the cubin / JIT-cache packages,
    the settings that change picks and the tuning files they name, by content."""
    real = importlib.metadata.version
    dists = {"nvidia-cudnn-frontend": "1.14.0", "flashinfer-cubin": "0.7.4", "flashinfer-jit-cache": "0.7.4+cu130"}
    monkeypatch.setattr(importlib.metadata, "version", lambda name: dists.get(name) or real(name))
    cache = tmp_path / "tune"
    cache.mkdir()
    (cache / "mm_fp4.json").write_text('{"a": 1}')
    monkeypatch.setenv("CUDA_HOME", _fake_nvcc(tmp_path, "12.9"))
    monkeypatch.setenv("FLASHINFER_AUTOTUNE_CACHE_DIR", str(cache))
    monkeypatch.setenv("FLASHINFER_TACTICS_BLOCKLIST", str(tmp_path / "missing.json"))
    fp = collect_fingerprint("cpu")
    assert fp.nvcc == "12.9 (V12.9.88)"
    assert (fp.cudnn_frontend, fp.flashinfer_cubin, fp.flashinfer_jit_cache) == ("1.14.0", "0.7.4", "0.7.4+cu130")
    assert fp.flashinfer_pick_env == (f"FLASHINFER_AUTOTUNE_CACHE_DIR={cache}, "
                                      f"FLASHINFER_TACTICS_BLOCKLIST={tmp_path / 'missing.json'}")
    assert fp.flashinfer_tuning_files == "mm_fp4.json:f9d86028c6e0, missing.json:absent"
    (cache / "mm_fp4.json").write_text('{"a": 2}')  # another tuned pick: another fingerprint
    monkeypatch.setenv("CUDA_HOME", _fake_nvcc(tmp_path / "13", "13.0"))
    again = collect_fingerprint("cpu")
    changed = {k for k, _, _ in fp.differences(again)}
    assert changed == {"nvcc", "flashinfer_tuning_files"}, fp.differences(again)


def test_without_nvcc_or_settings_the_fields_are_none(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    for var in ("FLASHINFER_AUTOTUNE_CACHE_DIR", "FLASHINFER_TACTICS_BLOCKLIST", "FLASHINFER_AUTOTUNER_LOAD_FROM_FILE",
                "FLASHINFER_DIST_AWARE_AUTOTUNE", "FLASHINFER_AUTOTUNE_TIMER", "FLASHINFER_NVCC"):
        monkeypatch.delenv(var, raising=False)
    fp = collect_fingerprint("cpu")
    assert fp.nvcc is None and fp.flashinfer_pick_env is None and fp.flashinfer_tuning_files is None
