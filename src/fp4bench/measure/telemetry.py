"""NVML telemetry around a timed window: power, clocks, temperature, throttling, energy.

Why: a GEMM that got slower because the GPU sat at its power cap is not a regression of the
kernel. The gate needs to know, per benchmark, whether clocks were held down
and, when the window is long enough, how much energy the calls took.

Design rules:

* Everything is guarded. No nvidia-ml-py, no driver, no GPU, MIG/vGPU refusing a query: the
  affected fields are ``None`` and nothing is raised into the benchmark.
* NVML is initialized once per process and never shut down by us (``gpus.nvml.load``), and the
  GPU is opened by its UUID (``gpus.nvml.handle``), never by an index.
* **The timed thread never touches NVML.** :class:`TelemetrySampler` does *all* its NVML
  calls -- the before/after snapshots included -- on its own background thread; ``__enter__``
  only waits for that thread's first snapshot and ``__exit__`` only signals and joins it.
  The thread calls nothing but NVML (no CUDA, no torch), and sleeps on an ``Event`` between
  polls. pynvml calls into ``libnvidia-ml`` through ``ctypes.CDLL``, which releases the GIL
  for the duration of each foreign call, so the only GIL time it takes from the timed thread
  is its few microseconds of Python bookkeeping per poll.

NVML facts this relies on (NVML API reference):
``nvmlDeviceGetPowerUsage`` is a ~1 s moving
average on Ampere and newer (except GA100), so per-window power is smoothed; the energy counter
updates only every ~100 ms, so energy per call is meaningful only for windows of >= ~1 s; the
current clock-event-reasons bitmask is instantaneous (a poll between kernels may see GpuIdle),
which is why the cumulative throttle-time counters are read too.
"""

from __future__ import annotations

import statistics
import threading
from fp4bench import clock
from dataclasses import dataclass, field
from typing import Any, Callable

from fp4bench.gpus import nvml as gpu_nvml

# --- clock-event reasons ----------------------------------------------------------------------

#: NVML ``nvmlClocksEventReason*`` bits, in bit order. 0x200/0x400 exist only in the older
#: ``nvmlClocksThrottleReason*`` set of nvidia-ml-py; they are named so they never show as unknown.
REASON_BITS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "AppClocks",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermal",
    0x40: "HwThermal",
    0x80: "HwPowerBrake",
    0x100: "DisplayClock",
    0x200: "BoardLimit",
    0x400: "Reliability",
}

#: Reasons that hold clocks down without meaning "the kernel ran slower than it could":
#: an idle GPU between kernels, or clocks deliberately set by the operator.
NON_THROTTLE_REASONS: frozenset[str] = frozenset({"GpuIdle", "AppClocks"})


def decode_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clock-event-reasons mask, lowest bit first.

    Unknown bits come back as ``"Unknown0x<hex>"`` so they are visible (and count as throttling).
    """
    if mask < 0:
        raise ValueError(f"clock-event-reasons mask must be >= 0, got {mask}")
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(REASON_BITS.get(bit, f"Unknown{bit:#x}"))
        bit <<= 1
    return names


def is_throttle_reason(name: str) -> bool:
    """True for reasons that mean clocks were limited below what the workload asked for."""
    return name not in NON_THROTTLE_REASONS


# --- cumulative throttle-time counters (nvmlDeviceGetFieldValues) -----------------------------

#: our key -> (nvidia-ml-py constant name, fallback id). The ids are the ones defined by
#: nvidia-ml-py 13.x; older nvidia-ml-py releases numbered the last three
#: 251/252/253, so the installed module's constant wins when it has one.
THROTTLE_FIELDS: dict[str, tuple[str, int]] = {
    "sw_power_cap": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", 74),
    "sync_boost": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST", 76),
    "sw_thermal": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", 269),
    "hw_thermal": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", 270),
    "hw_power_brake": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", 271),
}

# nvmlValueType_t -> c_nvmlValue_t union member.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_ids(lib: Any) -> dict[str, int]:
    """Throttle-time field ids as the given pynvml module defines them (fallback: documented ids)."""
    return {key: int(getattr(lib, const, default)) for key, (const, default) in THROTTLE_FIELDS.items()}


def _field_value(fv: Any) -> int | float | None:
    """Value of one ``c_nvmlFieldValue_t``; None when NVML reported an error for that field."""
    if getattr(fv, "nvmlReturn", 1) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(getattr(fv, "valueType", -1)))
    if member is None:
        return None
    return getattr(fv.value, member, None)


# --- guarded NVML queries ---------------------------------------------------------------------


def _guard(fn: Callable[..., Any], *args: Any) -> Any:
    """Call one NVML query; any failure (unsupported, MIG, lost GPU, missing symbol) -> None."""
    try:
        return fn(*args)
    except Exception:
        return None


def _first_supported(lib: Any, names: tuple[str, ...], *args: Any) -> Any:
    """Try the newer API first, then its deprecated fallback; None when none answers."""
    for name in names:
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        value = _guard(fn, *args)
        if value is not None:
            return value
    return None


class _Device:
    """Guarded NVML queries on one device handle. Only the sampler thread uses an instance."""

    def __init__(self, lib: Any, handle: Any) -> None:
        self.lib = lib
        self.handle = handle
        self.fields = field_ids(lib)
        self._sm = getattr(lib, "NVML_CLOCK_SM", 1)
        self._mem = getattr(lib, "NVML_CLOCK_MEM", 2)
        self._temp_sensor = getattr(lib, "NVML_TEMPERATURE_GPU", 0)

    def power_mw(self) -> int | None:
        return _guard(self.lib.nvmlDeviceGetPowerUsage, self.handle)

    def sm_clock(self) -> int | None:
        return _guard(self.lib.nvmlDeviceGetClockInfo, self.handle, self._sm)

    def mem_clock(self) -> int | None:
        return _guard(self.lib.nvmlDeviceGetClockInfo, self.handle, self._mem)

    def temperature(self) -> int | None:
        return _first_supported(
            self.lib, ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), self.handle, self._temp_sensor
        )

    def reasons(self) -> int | None:
        return _first_supported(
            self.lib,
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            self.handle,
        )

    def energy_mj(self) -> int | None:
        return _guard(self.lib.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def throttle_counters(self) -> dict[str, int | float | None]:
        """Cumulative throttle time per field (ns per nvml.h); missing fields -> None."""
        keys = list(self.fields)
        values = _guard(self.lib.nvmlDeviceGetFieldValues, self.handle, [self.fields[k] for k in keys])
        if values is None:
            return dict.fromkeys(keys)
        out: dict[str, int | float | None] = {}
        for key, fv in zip(keys, values):
            out[key] = _guard(_field_value, fv)
        return out


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One poll; any field may be None when that query is unsupported."""

    t_s: float
    power_mw: int | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    temp_c: int | None
    reasons: int | None


def _values(samples: list[Sample], attr: str) -> list[float]:
    return [v for v in (getattr(s, attr) for s in samples) if v is not None]


def _delta(before: int | float | None, after: int | float | None) -> int | float | None:
    """after - before for a monotone counter; None when unknown or it went backwards (reset)."""
    if before is None or after is None or after < before:
        return None
    return after - before


@dataclass(frozen=True)
class Telemetry:
    """What NVML saw during one window. ``None`` everywhere means "not measured", never zero."""

    samples: int = 0
    window_s: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_median_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_min_mhz: float | None = None
    mem_clock_median_mhz: float | None = None
    temp_max_c: float | None = None
    reasons_mask: int | None = None  # OR of every polled bitmask
    throttle_sample_fraction: float | None = None  # polls that showed a throttling reason
    energy_j: float | None = None
    throttle_ns: dict[str, int | float | None] = field(default_factory=dict)
    min_energy_window_s: float = 1.0
    error: str | None = None  # why nothing (or not everything) could be read

    @property
    def reasons(self) -> list[str]:
        """Every clock-event reason seen in any poll, decoded to names."""
        return [] if self.reasons_mask is None else decode_reasons(self.reasons_mask)

    @property
    def throttled(self) -> bool | None:
        """True if clocks were limited: a throttle-time counter advanced, or a poll showed a
        throttling reason (GpuIdle and AppClocks do not count). None when NVML gave us nothing
        to decide on -- unknown is not the same as "not throttled"."""
        counters = [v for v in self.throttle_ns.values() if v is not None]
        if any(v > 0 for v in counters):
            return True
        if any(is_throttle_reason(r) for r in self.reasons):
            return True
        if not counters and self.reasons_mask is None:
            return None
        return False

    @property
    def energy_window_ok(self) -> bool:
        """The energy delta spans enough counter updates (~100 ms each) to be meaningful."""
        return self.energy_j is not None and self.window_s is not None and self.window_s >= self.min_energy_window_s

    def joules_per_call(self, n_calls: int) -> float | None:
        """Energy delta / calls, or None when unmeasured or the window was shorter than
        ``min_energy_window_s`` (NVML's counter steps every ~100 ms, so a 50 ms window can read 0 J)."""
        if isinstance(n_calls, bool) or not isinstance(n_calls, int) or n_calls <= 0:
            raise ValueError(f"n_calls must be a positive int, got {n_calls!r}")
        if not self.energy_window_ok:
            return None
        assert self.energy_j is not None
        return self.energy_j / n_calls

    def to_extra_info(self, n_calls: int | None = None) -> dict[str, Any]:
        """Flat, JSON-serialisable keys for pytest-benchmark's ``extra_info``."""
        info: dict[str, Any] = {
            "power_w": self.power_mean_w,
            "power_max_w": self.power_max_w,
            "sm_clock_mhz": self.sm_clock_median_mhz,
            "sm_clock_min_mhz": self.sm_clock_min_mhz,
            "sm_clock_max_mhz": self.sm_clock_max_mhz,
            "mem_clock_mhz": self.mem_clock_median_mhz,
            "temp_c": self.temp_max_c,
            "throttle_reasons": self.reasons,
            "throttle_sample_fraction": self.throttle_sample_fraction,
            "throttled": self.throttled,
            "energy_j": self.energy_j,
            "joules_per_gemm": self.joules_per_call(n_calls) if n_calls is not None else None,
            "telemetry_window_s": self.window_s,
            "telemetry_samples": self.samples,
        }
        for key, value in self.throttle_ns.items():
            info[f"throttle_ns_{key}"] = value
        if self.error is not None:
            info["telemetry_error"] = self.error
        return info

    @classmethod
    def summarize(
        cls,
        samples: list[Sample],
        *,
        window_s: float | None,
        energy_mj: int | float | None,
        throttle_ns: dict[str, int | float | None],
        min_energy_window_s: float,
        error: str | None = None,
    ) -> "Telemetry":
        """Reduce raw polls and counter deltas to the summary the gate and reports use."""
        power = [p / 1000.0 for p in _values(samples, "power_mw")]
        sm = _values(samples, "sm_clock_mhz")
        mem = _values(samples, "mem_clock_mhz")
        temp = _values(samples, "temp_c")
        masks = [int(m) for m in _values(samples, "reasons")]
        union = None
        fraction = None
        if masks:
            union = 0
            for m in masks:
                union |= m
            hits = sum(any(is_throttle_reason(r) for r in decode_reasons(m)) for m in masks)
            fraction = hits / len(masks)
        return cls(
            samples=len(samples),
            window_s=window_s,
            power_mean_w=statistics.fmean(power) if power else None,
            power_max_w=max(power) if power else None,
            sm_clock_min_mhz=min(sm) if sm else None,
            sm_clock_median_mhz=statistics.median(sm) if sm else None,
            sm_clock_max_mhz=max(sm) if sm else None,
            mem_clock_min_mhz=min(mem) if mem else None,
            mem_clock_median_mhz=statistics.median(mem) if mem else None,
            temp_max_c=max(temp) if temp else None,
            reasons_mask=union,
            throttle_sample_fraction=fraction,
            energy_j=energy_mj / 1000.0 if energy_mj is not None else None,
            throttle_ns=dict(throttle_ns),
            min_energy_window_s=min_energy_window_s,
            error=error,
        )


# --- the sampler ------------------------------------------------------------------------------


class TelemetrySampler:
    """Context manager: poll NVML on a background thread while the body (the timed window) runs.

    ::

        with for_device(device) as tel:
            run_timed_loop()
        extra_info.update(tel.result.to_extra_info(n_calls))

    ``gpu`` is the NVML UUID (``"GPU-…"``, ``"MIG-…"``) of the GPU the window times
    (:func:`for_device` finds it), or None where that GPU cannot be named: then nothing is read and
    the result says why (an index would be another GPU's under ``CUDA_VISIBLE_DEVICES``).
    ``nvml`` injects a pynvml-like object (tests, or a caller that manages NVML itself; it must
    already be initialized); by default the process-wide ``gpus.nvml.load`` module is used.
    """

    def __init__(
        self,
        gpu: str | None,
        period_s: float = 0.005,
        *,
        nvml: Any | None = None,
        min_energy_window_s: float = 1.0,
        start_timeout_s: float = 5.0,
    ) -> None:
        if gpu is not None:
            try:
                gpu_nvml.check_uuid(gpu)
            except ValueError as exc:
                raise ValueError(f"gpu: {exc}") from None
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0 seconds, got {period_s!r}")
        if not min_energy_window_s >= 0:
            raise ValueError(f"min_energy_window_s must be >= 0 seconds, got {min_energy_window_s!r}")
        self.gpu = gpu
        self.period_s = float(period_s)
        self.min_energy_window_s = float(min_energy_window_s)
        self.start_timeout_s = float(start_timeout_s)
        self._nvml = nvml
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.samples: list[Sample] = []
        self.result: Telemetry | None = None
        # Written by the sampler thread only; read after join.
        self._error: str | None = None
        self._t0: float | None = None
        self._t1: float | None = None
        self._energy0: int | None = None
        self._energy1: int | None = None
        self._thr0: dict[str, Any] = {}
        self._thr1: dict[str, Any] = {}

    # The background thread: every NVML call of the sampler happens in here.
    def _run(self) -> None:
        try:
            self._sample_loop()
        except Exception as exc:  # a bug or an exotic NVML object: report, never raise
            self._error = f"telemetry thread failed: {exc!r}"
        finally:
            self._ready.set()

    def _sample_loop(self) -> None:
        dev: _Device | None = None
        try:
            lib, reason = (self._nvml, None) if self._nvml is not None else gpu_nvml.load()
            if self.gpu is None:
                self._error = "the timed GPU has no known NVML UUID (none from torch or CUDA_VISIBLE_DEVICES)"
            elif lib is None:
                self._error = reason
            else:
                handle = gpu_nvml.handle(lib, self.gpu)
                if handle is None:
                    self._error = f"NVML has no device {self.gpu}"
                else:
                    dev = _Device(lib, handle)
                    self._energy0 = dev.energy_mj()
                    self._thr0 = dev.throttle_counters()
                    self._t0 = clock.now()
        finally:
            self._ready.set()
        if dev is None:
            return
        while True:
            self.samples.append(
                Sample(
                    t_s=clock.now(),
                    power_mw=dev.power_mw(),
                    sm_clock_mhz=dev.sm_clock(),
                    mem_clock_mhz=dev.mem_clock(),
                    temp_c=dev.temperature(),
                    reasons=dev.reasons(),
                )
            )
            if self._stop.wait(self.period_s):
                break
        self._t1 = clock.now()
        self._energy1 = dev.energy_mj()
        self._thr1 = dev.throttle_counters()

    def __enter__(self) -> "TelemetrySampler":
        if self._thread is not None:
            raise RuntimeError("TelemetrySampler is single-use; create a new one per window")
        self._thread = threading.Thread(target=self._run, name="fp4bench-telemetry", daemon=True)
        self._thread.start()
        # Wait for the start snapshot so it precedes the timed window.
        self._ready.wait(self.start_timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._thread is not None
        self._stop.set()
        self._thread.join(timeout=max(self.start_timeout_s, 20 * self.period_s))
        error = self._error
        if self._thread.is_alive():
            error = "telemetry thread did not stop in time (an NVML call hung)"
        window = None if self._t0 is None or self._t1 is None else self._t1 - self._t0
        throttle = {key: _delta(self._thr0.get(key), self._thr1.get(key)) for key in THROTTLE_FIELDS}
        self.result = Telemetry.summarize(
            list(self.samples),
            window_s=window,
            energy_mj=_delta(self._energy0, self._energy1),
            throttle_ns=throttle,
            min_energy_window_s=self.min_energy_window_s,
            error=error,
        )


def for_device(device: Any, **kw: Any) -> TelemetrySampler:
    """The sampler of torch's CUDA ``device``, opened by the GPU's UUID (``gpus.devices.device_uuid``:
    torch's device properties, else ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it); a worker pinned
    to its GPU sees it as ``cuda:0``, whatever NVML's index of it. ``kw`` go to :class:`TelemetrySampler`."""
    from fp4bench.gpus.devices import device_uuid

    return TelemetrySampler(device_uuid(device), **kw)


# --- once-per-run facts -----------------------------------------------------------------------
