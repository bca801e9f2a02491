"""CPU tests of the NVML telemetry layer, against a scripted fake pynvml."""

from __future__ import annotations

import json
import sys
import threading
import time
import types

import pytest

from fp4bench.gpus import nvml
from fp4bench.measure import telemetry as tm
from fp4bench.measure.telemetry import Telemetry, TelemetrySampler, decode_reasons
from fakes.nvml import GPU0, FakeNVML, FakeNVMLError


def _sample(fake: FakeNVML, seconds: float = 0.03, **kw) -> tuple[TelemetrySampler, Telemetry]:
    with TelemetrySampler(GPU0, period_s=0.002, nvml=fake, **kw) as s:
        time.sleep(seconds)
    assert s.result is not None
    return s, s.result


# --- reasons ----------------------------------------------------------------------------------


def test_decode_reasons_names_each_bit():
    assert decode_reasons(0) == []
    assert decode_reasons(0x1) == ["GpuIdle"]
    assert decode_reasons(0x4 | 0x1) == ["GpuIdle", "SwPowerCap"]
    every = sum(1 << i for i in range(9))  # 0x1..0x100, the documented set
    assert decode_reasons(every) == [
        "GpuIdle", "AppClocks", "SwPowerCap", "HwSlowdown", "SyncBoost",
        "SwThermal", "HwThermal", "HwPowerBrake", "DisplayClock",
    ]
    assert decode_reasons(0x1000) == ["Unknown0x1000"]
    with pytest.raises(ValueError, match="mask"):
        decode_reasons(-1)


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0x1, False),  # idle between kernels is not throttling
        (0x2, False),  # operator-set application clocks are not throttling
        (0x3, False),
        (0x4, True),  # SwPowerCap
        (0x5, True),
        (0x20, True),  # SwThermal
        (0x80, True),  # HwPowerBrake
        (0x1000, True),  # unknown limiter: flag it rather than hide it
        (0x0, False),
    ],
)
def test_throttled_from_reasons(mask, expected):
    tel = Telemetry(samples=3, reasons_mask=mask, throttle_ns={"sw_power_cap": 0})
    assert tel.throttled is expected


def test_throttled_from_counter_delta_even_when_polls_missed_it():
    # Polls only ever saw GpuIdle (instantaneous), but the cumulative counter advanced.
    tel = Telemetry(samples=3, reasons_mask=0x1, throttle_ns={"sw_power_cap": 0, "sw_thermal": 1_500})
    assert tel.throttled is True


def test_throttled_unknown_without_any_data():
    assert Telemetry().throttled is None
    assert Telemetry(throttle_ns={"sw_power_cap": None}).throttled is None


# --- energy -----------------------------------------------------------------------------------


def test_joules_per_call_and_min_window():
    long = Telemetry(energy_j=250.0, window_s=2.0, min_energy_window_s=1.0)
    assert long.joules_per_call(1000) == pytest.approx(0.25)
    short = Telemetry(energy_j=250.0, window_s=0.5, min_energy_window_s=1.0)
    assert not short.energy_window_ok
    assert short.joules_per_call(1000) is None
    assert Telemetry(energy_j=None, window_s=5.0).joules_per_call(10) is None
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="n_calls"):
            long.joules_per_call(bad)


def test_sampler_energy_delta_and_per_call():
    fake = FakeNVML(energy=(1_000_000, 1_250_500))  # mJ -> 250.5 J
    _, tel = _sample(fake, min_energy_window_s=0.0)
    assert tel.energy_j == pytest.approx(250.5)
    assert tel.joules_per_call(501) == pytest.approx(0.5)
    # Same counters, default 1 s minimum window: a 30 ms window is too short to trust.
    _, tel = _sample(FakeNVML(energy=(1_000_000, 1_250_500)))
    assert tel.energy_j == pytest.approx(250.5)
    assert tel.window_s is not None and tel.window_s < 1.0
    assert tel.joules_per_call(501) is None


def test_energy_counter_reset_gives_none():
    _, tel = _sample(FakeNVML(energy=(5_000, 1_000)), min_energy_window_s=0.0)
    assert tel.energy_j is None


# --- sampler ----------------------------------------------------------------------------------


def test_sampler_collects_on_background_thread_only():
    fake = FakeNVML(power=(600_000, 700_000), sm=(1980, 1470, 1755), reasons=(0x1, 0x4))
    sampler, tel = _sample(fake, seconds=0.05)
    assert sampler._thread is not None and not sampler._thread.is_alive()
    assert tel.samples >= 2
    assert tel.error is None
    # The timed (main) thread never called NVML: every call came from the sampler thread.
    assert threading.get_ident() not in fake.threads
    assert len(fake.threads) == 1
    # Snapshots bracket the polls: energy/fields first and last.
    assert fake.calls[1:3] == ["energy", "fields"] and fake.calls[-2:] == ["energy", "fields"]
    assert tel.power_max_w == pytest.approx(700.0)
    assert 600.0 <= tel.power_mean_w <= 700.0
    assert tel.sm_clock_min_mhz >= 1470 and tel.sm_clock_max_mhz <= 1980
    assert tel.sm_clock_min_mhz <= tel.sm_clock_median_mhz <= tel.sm_clock_max_mhz
    assert tel.mem_clock_median_mhz == 3201
    assert tel.temp_max_c == 61  # TemperatureV preferred
    assert tel.reasons == ["GpuIdle", "SwPowerCap"]
    assert tel.throttled is True
    assert 0.0 < tel.throttle_sample_fraction < 1.0


def test_sampler_only_idle_is_not_throttled():
    _, tel = _sample(FakeNVML(reasons=(0x1,)))
    assert tel.reasons == ["GpuIdle"]
    assert tel.throttle_ns == {k: 0 for k in tm.THROTTLE_FIELDS}
    assert tel.throttled is False
    assert tel.throttle_sample_fraction == 0.0


def test_sampler_counter_delta_marks_throttled():
    throttle = {74: (10_000, 2_010_000), 76: (0, 0), 269: None, 270: (5, 5), 271: (0, 0)}
    _, tel = _sample(FakeNVML(reasons=(0x1,), throttle=throttle))
    assert tel.throttle_ns["sw_power_cap"] == 2_000_000
    assert tel.throttle_ns["sw_thermal"] is None  # unsupported field stays None, not 0
    assert tel.throttle_ns["hw_thermal"] == 0
    assert tel.throttled is True


def test_temperature_falls_back_to_deprecated_api():
    _, tel = _sample(FakeNVML(temp_v=False))
    assert tel.temp_max_c == 59


def test_unsupported_queries_are_none_not_errors():
    fake = FakeNVML()

    def boom(*_):
        raise FakeNVMLError("Not Supported")

    fake.nvmlDeviceGetPowerUsage = boom
    fake.nvmlDeviceGetCurrentClocksEventReasons = boom
    fake.nvmlDeviceGetFieldValues = boom
    _, tel = _sample(fake)
    assert tel.samples >= 1
    assert tel.power_mean_w is None and tel.reasons_mask is None
    assert all(v is None for v in tel.throttle_ns.values())
    assert tel.throttled is None
    assert tel.sm_clock_median_mhz == 1980


def test_bad_device_index_is_reported_not_raised():
    _, tel = _sample(FakeNVML(), seconds=0.0)
    assert tel.error is None
    with TelemetrySampler("GPU-fake-3", nvml=FakeNVML()) as s:
        pass
    assert s.result.samples == 0 and "no device GPU-fake-3" in s.result.error


def test_an_unnamed_gpu_is_reported_and_never_read():
    fake = FakeNVML()
    with TelemetrySampler(None, period_s=0.002, nvml=fake) as s:
        pass
    assert s.result.samples == 0 and "no known NVML UUID" in s.result.error
    assert fake.calls == []


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="gpu: an NVML GPU is named by its UUID .*got -1"):
        TelemetrySampler(-1)
    with pytest.raises(ValueError, match="by its UUID .*got 0"):
        TelemetrySampler(0)  # an index is another GPU's under CUDA_VISIBLE_DEVICES
    with pytest.raises(ValueError, match="by its UUID"):
        TelemetrySampler("0")
    with pytest.raises(ValueError, match="period_s"):
        TelemetrySampler(GPU0, period_s=0)
    with pytest.raises(ValueError, match="min_energy_window_s"):
        TelemetrySampler(GPU0, min_energy_window_s=-1)
    s = TelemetrySampler(GPU0, nvml=FakeNVML())
    with s:
        pass
    with pytest.raises(RuntimeError, match="single-use"):
        with s:
            pass


def test_body_exception_propagates_and_thread_stops():
    s = TelemetrySampler(GPU0, period_s=0.002, nvml=FakeNVML())
    with pytest.raises(KeyError):
        with s:
            raise KeyError("benchmark failed")
    assert not s._thread.is_alive() and s.result is not None


def test_extra_info_is_flat_json():
    fake = FakeNVML(reasons=(0x5,), energy=(0, 3_000_000),
                    throttle={74: (0, 7), 76: (0, 0), 269: (0, 0), 270: (0, 0), 271: None})
    _, tel = _sample(fake, min_energy_window_s=0.0)
    info = tel.to_extra_info(n_calls=1000)
    round_trip = json.loads(json.dumps(info))
    assert round_trip == info
    for key in ("power_w", "sm_clock_mhz", "sm_clock_min_mhz", "temp_c", "throttle_reasons", "throttled",
                "energy_j", "joules_per_gemm", "telemetry_window_s", "telemetry_samples"):
        assert key in info
    assert all(not isinstance(v, dict) for v in info.values())
    assert info["throttle_reasons"] == ["GpuIdle", "SwPowerCap"]
    assert info["throttled"] is True
    assert info["joules_per_gemm"] == pytest.approx(3000.0 / 1000)  # 3e6 mJ over 1000 calls
    assert info["throttle_ns_sw_power_cap"] == 7 and info["throttle_ns_hw_power_brake"] is None


# --- missing NVML / process-wide init ---------------------------------------------------------


@pytest.fixture
def fresh_nvml_state(monkeypatch):
    monkeypatch.setattr(nvml, "_STATE", None)
    return monkeypatch


def test_missing_pynvml_gives_all_none(fresh_nvml_state):
    fresh_nvml_state.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with TelemetrySampler(GPU0, period_s=0.002) as s:
        time.sleep(0.01)
    tel = s.result
    assert tel.samples == 0 and tel.throttled is None and tel.energy_j is None
    assert "pynvml" in tel.error
    info = tel.to_extra_info(10)
    json.dumps(info)
    assert info["power_w"] is None and info["joules_per_gemm"] is None


def test_nvml_init_failure_and_init_once(fresh_nvml_state):
    failing = types.ModuleType("pynvml")

    def bad_init():
        raise FakeNVMLError("Driver Not Loaded")

    failing.nvmlInit = bad_init
    fresh_nvml_state.setitem(sys.modules, "pynvml", failing)
    lib, reason = nvml.load()
    assert lib is None and "Driver Not Loaded" in reason

    fresh_nvml_state.setattr(nvml, "_STATE", None)
    fake = FakeNVML()
    fresh_nvml_state.setitem(sys.modules, "pynvml", fake)
    for _ in range(3):
        with TelemetrySampler(GPU0, period_s=0.002):
            pass
    assert nvml.load()[0] is fake
    assert fake.inits == 1


def test_field_ids_follow_installed_pynvml():
    # The installed nvidia-ml-py's own constants are used when present (ids moved between releases).
    pynvml = pytest.importorskip("pynvml")
    ids = tm.field_ids(pynvml)
    assert ids["sw_power_cap"] == pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    assert ids["hw_power_brake"] == pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN
    old = types.SimpleNamespace(NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN=251)
    assert tm.field_ids(old) == {"sw_power_cap": 74, "sync_boost": 76, "sw_thermal": 251, "hw_thermal": 270,
                                 "hw_power_brake": 271}


# --- the pinned GPU: NVML by UUID -------------------------------------------------------------


class TwoGpuNVML(FakeNVML):
    """Two GPUs with their own power readings; handles by NVML index or by UUID."""

    UUIDS = ("GPU-11111111-aaaa", "GPU-22222222-bbbb")
    POWER = {"h0": 100_000, "h1": 200_000}

    def nvmlDeviceGetHandleByIndex(self, i):
        self._rec("handle")
        if i not in (0, 1):
            raise FakeNVMLError("Invalid Argument")
        return f"h{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._rec("handle")
        if uuid not in self.UUIDS:
            raise FakeNVMLError("Not Found")
        return f"h{self.UUIDS.index(uuid)}"

    def nvmlDeviceGetPowerUsage(self, h):
        self._rec("power")
        return self.POWER[h]


def test_a_pinned_worker_reads_its_own_gpu_not_nvml_device_0(monkeypatch):
    """Under CUDA_VISIBLE_DEVICES=1 torch's cuda:0 is NVML's device 1: the sampler of the case's
    device must read that GPU (by its UUID from torch's device properties), not NVML's device 0."""
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    props = types.SimpleNamespace(uuid="22222222-bbbb", name="NVIDIA H200", major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    with tm.for_device(torch.device("cuda:0"), period_s=0.002, nvml=TwoGpuNVML()) as s:
        time.sleep(0.01)
    assert s.gpu == "GPU-22222222-bbbb"
    assert s.result.error is None and s.result.power_mean_w == pytest.approx(200.0)


def test_without_a_uuid_from_torch_the_visible_gpus_name_it(monkeypatch):
    """A torch that reports no UUID: CUDA_VISIBLE_DEVICES read as CUDA reads it names the GPU."""
    import torch

    from fp4bench.gpus import devices

    monkeypatch.setenv(devices.FAKE_ENV, ",".join(TwoGpuNVML.UUIDS))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(name="x"))
    with tm.for_device(torch.device("cuda:0"), period_s=0.002, nvml=TwoGpuNVML()) as s:
        time.sleep(0.01)
    assert s.gpu == "GPU-22222222-bbbb" and s.result.power_mean_w == pytest.approx(200.0)
