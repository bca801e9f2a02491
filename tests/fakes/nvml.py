"""A scripted stand-in for pynvml: the functions the telemetry sampler calls, with set values."""

from __future__ import annotations

import itertools
import threading
import types

class FakeNVMLError(Exception):
    pass


GPU0 = "GPU-fake-0"  # the one GPU of FakeNVML


def _field(value: int | None, field_id: int) -> types.SimpleNamespace:
    """A c_nvmlFieldValue_t look-alike: valueType 3 = unsigned long long; nvmlReturn 3 = not supported."""
    return types.SimpleNamespace(
        fieldId=field_id,
        nvmlReturn=0 if value is not None else 3,
        valueType=3,
        value=types.SimpleNamespace(ullVal=value if value is not None else 0),
    )


class FakeNVML:
    """Implements the pynvml functions the sampler uses, with scripted values.

    Records the thread of every call so tests can check the timed thread never calls NVML.
    ``energy`` and ``throttle`` are sequences consumed one per snapshot (start, end).
    """

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST = 76
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271

    def __init__(self, *, reasons=(0x1,), energy=(1_000_000, 1_000_000), throttle=None, power=(650_000,),
                 sm=(1980,), temp_v=True):
        self.reasons_it = itertools.cycle(reasons)
        self.power_it = itertools.cycle(power)
        self.sm_it = itertools.cycle(sm)
        self.energy_it = iter(energy)
        # field id -> (start, end) values; None = unsupported field
        self.throttle = throttle or {74: (0, 0), 76: (0, 0), 269: (0, 0), 270: (0, 0), 271: (0, 0)}
        self.snap = 0
        self.threads: set[int] = set()
        self.calls: list[str] = []
        self.inits = 0
        if not temp_v:
            self.nvmlDeviceGetTemperatureV = None  # type: ignore[assignment]

    def _rec(self, name: str) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append(name)

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._rec("handle")
        if uuid != GPU0:
            raise FakeNVMLError("Not Found")
        return "h0"

    def nvmlDeviceGetPowerUsage(self, h):
        self._rec("power")
        return next(self.power_it)

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._rec("clock")
        return next(self.sm_it) if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        self._rec("tempV")
        return 61

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._rec("temp")
        return 59

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._rec("reasons")
        return next(self.reasons_it)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._rec("energy")
        return next(self.energy_it)

    def nvmlDeviceGetFieldValues(self, h, ids):
        self._rec("fields")
        idx = min(self.snap, 1)
        self.snap += 1
        return [_field(self.throttle[i][idx] if self.throttle.get(i) is not None else None, i) for i in ids]
