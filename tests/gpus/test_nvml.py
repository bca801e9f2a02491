"""NVML by UUID (gpus/nvml.py): under CUDA_VISIBLE_DEVICES the telemetry and the fingerprint read
the GPU that is timed, never NVML's device at torch's index. CPU only, against a fake pynvml."""

from __future__ import annotations

import sys
import time
import types

import pytest
import torch

from fp4bench.env import collect_fingerprint
from fp4bench.gpus import devices, nvml
from fp4bench.measure import telemetry as tm


class NotFound(Exception):
    pass


def four_gpu_pynvml(calls: list) -> types.ModuleType:
    """A pynvml module of four GPUs; each handle answers with its own power, limit and clocks."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    uuids = [f"GPU-0000000{i}-4444-4444-4444-444444444444" for i in range(4)]
    m.UUIDS = uuids
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: "580.95.05"
    m.nvmlDeviceGetCount = lambda: 4

    def by_index(i):
        if not 0 <= i < 4:
            raise NotFound(i)
        return f"h{i}"

    def by_uuid(u):
        calls.append(("by_uuid", u))
        if u not in uuids:
            raise NotFound(u)
        return f"h{uuids.index(u)}"

    gpu = lambda h: int(h[1:])  # noqa: E731
    m.nvmlDeviceGetHandleByIndex = by_index
    m.nvmlDeviceGetHandleByUUID = by_uuid
    m.nvmlDeviceGetUUID = lambda h: uuids[gpu(h)].encode()
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 100_000 * (gpu(h) + 1)  # mW: GPU 3 -> 400 W
    m.nvmlDeviceGetMaxClockInfo = lambda h, c: 1000 + gpu(h)
    m.nvmlDeviceGetPowerUsage = lambda h: 10_000 * (gpu(h) + 1)  # mW: GPU 3 -> 40 W
    m.nvmlDeviceGetClockInfo = lambda h, c: 1500 + gpu(h)
    m.nvmlDeviceGetTemperatureV = lambda h, s: 50 + gpu(h)
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: 0
    m.nvmlDeviceGetFieldValues = lambda h, ids: []
    return m


@pytest.fixture
def four_gpus(monkeypatch):
    """The fake pynvml installed, NVML's process state fresh, and torch's cuda:0 a GPU whose
    properties carry no UUID (so the UUID must come from CUDA_VISIBLE_DEVICES)."""
    calls: list = []
    m = four_gpu_pynvml(calls)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.setattr(nvml, "_STATE", None)
    monkeypatch.delenv(devices.FAKE_ENV, raising=False)
    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                                  total_memory=150_119_424_000, L2_cache_size=52_428_800)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    return m, calls


@pytest.mark.parametrize("mask", ["3", "GPU-00000003", "GPU-00000003-4444-4444-4444-444444444444,1"])
def test_telemetry_and_fingerprint_read_the_visible_gpu_not_nvml_device_0(four_gpus, monkeypatch, mask):
    m, calls = four_gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    with tm.for_device(torch.device("cuda:0"), period_s=0.002) as s:
        time.sleep(0.01)
    assert s.gpu == m.UUIDS[3]
    tel = s.result
    assert tel.error is None and tel.power_mean_w == pytest.approx(40.0) and tel.sm_clock_max_mhz == 1503
    fp = collect_fingerprint("cuda:0")
    assert fp.gpu_uuid == m.UUIDS[3]
    assert fp.power_limit_w == pytest.approx(400.0) and fp.sm_clock_max_mhz == 1003
    assert [c for c in calls if isinstance(c, tuple)] == [("by_uuid", m.UUIDS[3])] * 2


def test_torchs_own_uuid_wins(four_gpus, monkeypatch):
    m, _ = four_gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    props = types.SimpleNamespace(name="NVIDIA H200", uuid=m.UUIDS[2].removeprefix("GPU-"))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert devices.device_uuid(torch.device("cuda:0")) == m.UUIDS[2]
    assert devices.device_uuid(torch.device("cpu")) is None


def test_a_gpu_nobody_names_is_read_by_nobody(four_gpus, monkeypatch):
    """cuda:1 under CUDA_VISIBLE_DEVICES=3 names no GPU: telemetry says so, the fingerprint's
    NVML fields stay None (never GPU 1's)."""
    _, calls = four_gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with tm.for_device(torch.device("cuda:1"), period_s=0.002) as s:
        pass
    assert s.gpu is None and "no known NVML UUID" in s.result.error
    fp = collect_fingerprint("cuda:1")
    assert fp.gpu_uuid is None and fp.power_limit_w is None and fp.driver == "580.95.05"
    assert not [c for c in calls if isinstance(c, tuple)]


def test_session_shuts_down_and_load_initializes_once(four_gpus):
    m, calls = four_gpus
    with nvml.session() as lib:
        assert lib is m and nvml.all_gpus(lib)[3] == (m.UUIDS[3], "NVIDIA H200")
    assert calls == ["init", "shutdown"]
    assert nvml.load() == (m, None) and nvml.load() == (m, None)
    assert calls == ["init", "shutdown", "init"]


def test_handle_by_uuid_only(four_gpus):
    m, _ = four_gpus
    assert nvml.handle(m, m.UUIDS[1]) == "h1"
    assert nvml.handle(m, "GPU-unknown") is None
    for bad in (0, "0", "GPU-", None):
        with pytest.raises(ValueError, match="named by its UUID"):
            nvml.handle(m, bad)


def test_unusable_nvml_is_none_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(nvml, "_STATE", None)
    with nvml.session() as lib:
        assert lib is None
    lib, reason = nvml.load()
    assert lib is None and "pynvml" in reason
    assert nvml.all_gpus(types.SimpleNamespace()) == []
