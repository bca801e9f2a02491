"""CPU tests of kernel-identity capture (torch.profiler); the CUDA path is exercised on a GPU."""

from __future__ import annotations

import types

import pytest
import torch

from fp4bench.measure.kernels import (
    KernelCapture,
    capture_kernels,
    device_event_kind,
    kernel_names,
    normalize_kernel_name,
)

CUDA = torch.autograd.DeviceType.CUDA
CPU = torch.autograd.DeviceType.CPU


def _event(name, device_type=CUDA, start=0.0, end=10.0, activity_type=None, user_annotation=False):
    """A FunctionEvent look-alike: times in microseconds, as torch.profiler reports them."""
    return types.SimpleNamespace(
        name=name,
        device_type=device_type,
        time_range=types.SimpleNamespace(start=start, end=end),
        activity_type=activity_type,
        is_user_annotation=user_annotation,
    )


# --- normalize --------------------------------------------------------------------------------


def test_normalize_collapses_whitespace_only():
    raw = "void cutlass::Kernel2<\n   cutlass_80_tensorop_bf16_s16816gemm_128x128_32x4_nn_align8>(  Params )"
    norm = normalize_kernel_name(raw)
    assert norm == "void cutlass::Kernel2< cutlass_80_tensorop_bf16_s16816gemm_128x128_32x4_nn_align8>( Params )"
    assert normalize_kernel_name(norm) == norm  # idempotent
    assert normalize_kernel_name("  ampere_bf16_gemm\t") == "ampere_bf16_gemm"


def test_normalize_long_names_are_bounded_stable_and_distinct():
    base = "void cutlass::device_kernel<" + "cutlass::gemm::kernel::GemmUniversal<Tile<128,256,64>>, " * 40
    a, b = base + "Sm100>", base + "Sm90>"
    na, nb = normalize_kernel_name(a), normalize_kernel_name(b)
    assert len(na) <= 200 and len(nb) <= 200
    assert na != nb  # same long prefix, different tail: the hash keeps them apart
    assert na == normalize_kernel_name(a) == normalize_kernel_name(a.replace(" ", "  "))  # stable
    assert na.startswith("void cutlass::device_kernel<")
    assert normalize_kernel_name(a, max_len=60) != normalize_kernel_name(b, max_len=60)
    with pytest.raises(ValueError, match="max_len"):
        normalize_kernel_name(a, max_len=5)
    with pytest.raises(TypeError, match="str"):
        normalize_kernel_name(b"bytes")  # type: ignore[arg-type]


# --- event classification -----------------------------------------------------------------------


def test_device_event_kind():
    assert device_event_kind(_event("aten::mm", device_type=CPU)) is None
    assert device_event_kind(_event("gemm_kernel", activity_type="kernel")) == "kernel"
    assert device_event_kind(_event("Memset (Device)", activity_type="gpu_memset")) == "memset"
    assert device_event_kind(_event("Memcpy DtoD (Device -> Device)", activity_type="gpu_memcpy")) == "memcpy"
    assert device_event_kind(_event("my_range", activity_type="gpu_user_annotation")) is None
    assert device_event_kind(_event("my_range", user_annotation=True)) is None
    # Older torch without activity_type: Kineto's fixed copy/set names.
    assert device_event_kind(_event("Memset (Device)")) == "memset"
    assert device_event_kind(_event("Memcpy HtoD (Pageable -> Device)")) == "memcpy"
    assert device_event_kind(_event("sm90_xmma_gemm_bf16")) == "kernel"


def test_capture_from_events_sorts_dedups_and_keeps_memsets_apart():
    events = [
        _event("aten::mm", device_type=CPU, end=50.0),
        _event("zeta_gemm", start=0.0, end=12.0),
        _event("Memset (Device)", start=12.0, end=13.0),
        _event("alpha_epilogue", start=13.0, end=15.0),
        _event("zeta_gemm", start=20.0, end=32.0),
        _event("Memset (Device)", start=32.0, end=33.0),
        _event("alpha_epilogue", start=33.0, end=35.0),
        _event("Memcpy DtoD (Device -> Device)", start=40.0, end=44.0),
    ]
    cap = KernelCapture.from_events(events, repeats=2)
    assert cap.kernels == ("alpha_epilogue", "zeta_gemm")
    assert cap.memsets == ("Memset (Device)",)
    assert cap.memcpys == ("Memcpy DtoD (Device -> Device)",)
    assert cap.counts["Memset (Device)"] / cap.repeats == 1  # one extra memset per call: visible
    assert cap.total_s["zeta_gemm"] == pytest.approx(24e-6)
    assert cap.names() == ["alpha_epilogue", "zeta_gemm"]
    assert cap.names(include_memset=True, include_memcpy=True) == [
        "Memcpy DtoD (Device -> Device)", "Memset (Device)", "alpha_epilogue", "zeta_gemm",
    ]
    assert cap.reason is None


def test_capture_from_host_only_events_is_empty_with_reason():
    cap = KernelCapture.from_events([_event("aten::mm", device_type=CPU)], repeats=1)
    assert cap.kernels == () and cap.counts == {}
    assert "no device activity" in cap.reason


# --- the profiler path on this machine ---------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA behaviour")
def test_kernel_names_on_cpu_runs_fn_and_returns_empty():
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    calls = []

    def fn():
        calls.append(1)
        return a @ a  # a real CPU op: its profiler events must not be reported as kernels

    assert kernel_names(fn, repeats=3) == []
    assert len(calls) == 1 + 3  # one warm-up + three profiled
    cap = capture_kernels(fn, repeats=2, warmup=0)
    assert cap.kernels == () and "CUDA" in cap.reason


def test_fn_errors_propagate_and_profiler_is_stopped():
    def broken():
        raise ZeroDivisionError("benchmark bug")

    with pytest.raises(ZeroDivisionError):
        capture_kernels(broken, warmup=0)
    # The profiler was stopped: a second capture can start.
    assert capture_kernels(lambda: None, warmup=0).kernels == ()


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        kernel_names(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        kernel_names(lambda: None, warmup=-1)
    with pytest.raises(TypeError, match="callable"):
        capture_kernels(42)  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_matmul_kernels_on_gpu():
    x = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    cap = capture_kernels(lambda: x @ x, repeats=3)
    assert cap.kernels, cap.reason
    assert sum(cap.counts[k] for k in cap.kernels) % 3 == 0
    z = torch.empty(1 << 16, device="cuda")
    with_fill = capture_kernels(lambda: (z.zero_(), x @ x), repeats=2)
    assert set(cap.kernels) < set(with_fill.names(include_memset=True))  # the fill shows up


def test_device_time_per_group_splits_replays_in_time_order():
    from types import SimpleNamespace as NS

    from fp4bench.measure.kernels import device_time_per_group

    cuda = torch.autograd.DeviceType.CUDA

    def ev(start_us, dur_us, name="k", activity="kernel", dev=cuda):
        return NS(name=name, device_type=dev, activity_type=activity, is_user_annotation=False,
                  time_range=NS(start=start_us, end=start_us + dur_us))

    # two replays of (kernel 10 µs, memset 1 µs, kernel 5 µs), given out of order, plus host noise
    events = [ev(40, 5), ev(0, 10), ev(12, 1, "Memset", "gpu_memset"), ev(15, 5), ev(30, 10),
              ev(42, 1, "Memset", "gpu_memset"), ev(1, 99, "cpu op", None, torch.autograd.DeviceType.CPU)]
    busy = device_time_per_group(events, 2)
    assert busy == pytest.approx([16e-6, 16e-6])  # gaps between kernels are not charged
    assert device_time_per_group(events, 4) is None  # 6 device events do not split into 4 replays
    assert device_time_per_group([], 1) is None
