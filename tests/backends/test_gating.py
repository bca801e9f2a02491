"""Gating of the Blackwell-only FP4 backends, and the shared helpers in ``backends/builtin/_gating.py``.

The rule under test: ``availability`` decides from the device, its compute capability and
installed versions, in that order, and calls no library function before the capability check.
Fakes count their calls; library loaders are replaced by functions that fail the test.
"""

from __future__ import annotations

import sys

import pytest
import torch

from fakes.arch import pretend
from fakes.flashinfer import FakeFlashInfer
from fakes.sgl_kernel import FakeSglKernel
from fakes.torch_scaled_mm import FakeTorchScaledMM
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin import cublaslt
from fp4bench.backends.builtin import flashinfer_dense
from fp4bench.backends.builtin import sgl_kernel
from fp4bench.backends.builtin.cublaslt import CublasLtV1, CublasLtV2, CublasLtV2MXFP4
from fp4bench.backends.builtin.flashinfer_dense import VERIFIED_TABLES, FlashInferDense, default_config, tactic_configs
from fp4bench.backends.builtin.sgl_kernel import SglKernelDense, SglKernelGroup

CUDA = torch.device("cuda")


def _with_fakes():
    """(backend, fake) for every backend of the three modules."""
    fi, sgl, tsm = FakeFlashInfer(), FakeSglKernel(), FakeTorchScaledMM()
    return [(FlashInferDense(api=fi.api()), fi), (SglKernelDense(api=sgl.api()), sgl),
            (SglKernelGroup(api=sgl.api()), sgl), (CublasLtV1(api=tsm.api()), tsm),
            (CublasLtV2(api=tsm.api()), tsm), (CublasLtV2MXFP4(api=tsm.api()), tsm)]


@pytest.fixture
def no_real_libraries(monkeypatch):
    """Any attempt to load a real library (or probe its import) fails the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a library was loaded before the capability check")
    monkeypatch.setattr(flashinfer_dense, "load_flashinfer", forbidden)
    monkeypatch.setattr(sgl_kernel, "load_sgl_kernel", forbidden)
    monkeypatch.setattr(cublaslt, "load_torch_scaled_mm", forbidden)
    monkeypatch.setattr(_gating, "probe_import", forbidden)


def _real_backends():
    return [*flashinfer_dense.BACKENDS, *sgl_kernel.BACKENDS, *cublaslt.BACKENDS]


# -- order: device, capability, library -------------------------------------------------------

@pytest.mark.parametrize("device", [torch.device("cpu"), CUDA])
def test_this_machine_has_no_cuda_device(device, no_real_libraries):
    if device.type == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    for be, fake in _with_fakes():
        avail = be.availability(device)
        assert (avail.ok, avail.reason) == (False, "no CUDA device"), be.name
        assert fake.calls == 0
    for be in _real_backends():
        assert be.availability(device).reason == "no CUDA device", be.name


def test_hopper_is_refused_before_any_library_call(monkeypatch, no_real_libraries):
    pretend(monkeypatch, "H200")
    for be, fake in _with_fakes():
        avail = be.availability(CUDA)
        assert not avail.ok and "SM90" in avail.reason and "NVIDIA H200" in avail.reason, be.name
        assert "\n" not in avail.reason
        assert fake.calls == 0, f"{be.name} called its library on SM90"
    for be in _real_backends():
        assert "this GPU is SM90 (NVIDIA H200)" in be.availability(CUDA).reason, be.name
    assert CublasLtV1().availability(CUDA).reason == \
        "needs SM100/103/110/120/121 (Blackwell); this GPU is SM90 (NVIDIA H200)"
    assert SglKernelDense().availability(CUDA).reason == \
        "needs SM100/120 (Blackwell); this GPU is SM90 (NVIDIA H200)"


@pytest.mark.parametrize(("gpu", "expected"), [
    ("B200", {"flashinfer-cutlass", "sgl-kernel", "sgl-kernel-group", "cublaslt", "cublaslt-v2", "cublaslt-v2-mxfp4"}),
    ("B300", {"flashinfer-cutlass", "cublaslt", "cublaslt-v2", "cublaslt-v2-mxfp4"}),  # sgl_kernel: no sm_103 cubin
    ("RTX PRO 6000", {"flashinfer-cutlass", "sgl-kernel", "sgl-kernel-group", "cublaslt", "cublaslt-v2"}),
    ("GB10", {"flashinfer-cutlass", "cublaslt", "cublaslt-v2"}),
    ("Thor", {"flashinfer-cutlass", "cublaslt", "cublaslt-v2"}),
])
def test_blackwell_support_matrix(monkeypatch, gpu, expected):
    pretend(monkeypatch, gpu)
    got = {be.name for be, _ in _with_fakes() if be.availability(CUDA).ok}
    assert got == expected


def test_available_reports_the_library_version_and_caveats(monkeypatch):
    pretend(monkeypatch, "B300")
    fi, sgl, tsm = FakeFlashInfer(), FakeSglKernel(), FakeTorchScaledMM()
    assert FlashInferDense(api=fi.api()).availability(CUDA).version == "0.7.2.post1"
    avail = SglKernelDense(api=sgl.api()).availability(CUDA)
    assert not avail.ok and "no sm_103" in avail.reason and sgl.calls == 0  # would fail at launch
    pretend(monkeypatch, "B200")
    avail = SglKernelDense(api=sgl.api()).availability(CUDA)
    assert avail.ok and avail.version == "0.3.21"
    pretend(monkeypatch, "Thor")
    avail = CublasLtV1(api=tsm.api()).availability(CUDA)
    assert avail.ok and "unverified" in avail.reason and avail.version == "2.13.0-fake"
    pretend(monkeypatch, "RTX PRO 6000")
    assert "needs SM100/103" in CublasLtV2MXFP4(api=tsm.api()).availability(CUDA).reason


def test_flashinfer_library_checks(monkeypatch):
    pretend(monkeypatch, "B200")
    assert FlashInferDense(api=FakeFlashInfer(supported_sms=(120,)).api()).availability(CUDA).reason == \
        "flashinfer 0.7.2.post1: mm_fp4 backend 'cutlass' does not support SM100 (NVIDIA B200)"
    monkeypatch.setattr(_gating, "dist_version", lambda *names: None)
    assert FlashInferDense().availability(CUDA).reason == "flashinfer-python is not installed"


def test_sgl_kernel_import_failure_is_the_skip_reason(monkeypatch):
    """The import is probed in a child first; its error is the one-line reason, and the
    in-process import is never attempted."""
    pretend(monkeypatch, "B200")
    err = ("ImportError: /x/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: "
           "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib")
    monkeypatch.setattr(_gating, "dist_version", lambda *names: "0.3.21")
    monkeypatch.setattr(_gating, "module_installed", lambda name: True)
    monkeypatch.setattr(_gating, "probe_import", lambda name: _gating.ImportProbe(False, err))
    monkeypatch.setattr(sgl_kernel, "load_sgl_kernel", lambda: pytest.fail("imported in-process"))
    reason = SglKernelGroup().availability(CUDA).reason
    assert reason == (f"sgl_kernel 0.3.21 does not import under torch {torch.__version__}: {err} (built for torch "
                      "2.9.1: run the sgl rows in the sglang runner environment, docs/sglang-runner.md)")
    monkeypatch.setattr(_gating, "dist_version", lambda *names: None)
    monkeypatch.setattr(_gating, "module_installed", lambda name: False)
    assert SglKernelDense().availability(CUDA).reason == "sgl_kernel is not installed"


def test_cublaslt_checks_the_installed_torch(monkeypatch):
    pretend(monkeypatch, "B200")
    monkeypatch.setattr(cublaslt, "load_torch_scaled_mm", lambda: pytest.fail("loaded on a CPU build"))
    if torch.version.cuda is None:
        assert CublasLtV2().availability(CUDA).reason == f"torch {torch.__version__} is not a CUDA build"
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    assert "needs CUDA >= 12.8" in CublasLtV1().availability(CUDA).reason


# -- tactic labels (flashinfer 0.7.2.post1 sources) -------------------

@pytest.mark.parametrize(("index", "label"), [
    (0, "t00:128x128x256-c2x4-2sm"), (1, "t01:128x128x256-c1x4-1sm"), (2, "t02:128x256x256-c4x2-2sm"),
    (3, "t03:128x64x128-c1x4-1sm"), (4, "t04:128x128x256-c2x1-2sm"), (5, "t05:128x64x128-c1x1-1sm"),
    (11, "t11:128x64x128-c4x4-2sm"), (12, "t12:128x256x128-c1x1-1sm"), (16, "t16:128x256x128-c1x4-1sm"),
    (19, "t19:128x256x128-c4x4-2sm"), (20, "t20:128x128x256-c1x1-1sm"), (22, "t22:128x128x256-c2x2-2sm"),
    (24, "t24:128x128x256-c4x4-2sm"), (25, "t25:128x256x256-c1x1-1sm"), (30, "t30:128x256x256-c2x4-2sm"),
    (31, "t31:128x256x256-c4x4-2sm"),
])
@pytest.mark.parametrize("version", VERIFIED_TABLES)
def test_sm100_labels(index, label, version):
    configs = tactic_configs(32, 10, 0, version)
    assert f"t{index:02d}:{configs[index]}" == label
    assert len(set(configs)) == 32
    assert tactic_configs(32, 11, 0, version) == configs  # SM110 loads the SM100 module


@pytest.mark.parametrize(("index", "label"), [
    (0, "t00:128x32x128-swap-dp"), (1, "t01:128x32x128-noswap-dp"), (2, "t02:128x32x128-swap-streamk"),
    (3, "t03:128x32x128-noswap-streamk"), (5, "t05:128x32x256-noswap-dp"), (21, "t21:128x128x256-noswap-dp"),
    (26, "t26:256x128x128-swap-streamk"), (31, "t31:128x256x128-noswap-streamk"),
])
@pytest.mark.parametrize("version", VERIFIED_TABLES)
def test_sm120_labels(index, label, version):
    assert f"t{index:02d}:{tactic_configs(32, 12, 0, version)[index]}" == label
    assert f"t{index:02d}:{tactic_configs(32, 12, 1, version)[index]}" == label


def test_flashinfer_0_7_4_keeps_the_verified_configs_and_defaults():
    """0.7.4 ships the 0.7.2.post1 tables byte for byte: its tactics keep their configs."""
    for major, minor in ((10, 0), (12, 0)):
        assert tactic_configs(32, major, minor, "0.7.4") == tactic_configs(32, major, minor, "0.7.2.post1")
        assert default_config(major, minor, "0.7.4") == default_config(major, minor, "0.7.2.post1")
    assert default_config(12, 0, "0.7.4") == "128x128x256-noswap-dp"


def test_unknown_tables_say_why_the_config_is_unknown():
    v = VERIFIED_TABLES[0]
    assert tactic_configs(63, 10, 3, v) == [f"config unknown on SM103 (flashinfer {v}: table not verified)"] * 63
    assert tactic_configs(30, 10, 0, v) == [f"config unknown: flashinfer {v} lists 30 tactics on SM100, "
                                            "the verified table 32"] * 30
    # another release may order its list differently
    assert tactic_configs(32, 10, 0, "0.7.5") == ["config unknown for flashinfer 0.7.5 (tables not verified)"] * 32
    assert default_config(12, 0, "0.7.5") == "config unknown for flashinfer 0.7.5 (tables not verified)"


def test_tactics_come_from_the_runner(monkeypatch):
    pretend(monkeypatch, "GB10")
    fake = FakeFlashInfer()
    from fp4bench.workload.problems import GemmProblem

    tactics = FlashInferDense(api=fake.api()).tactics(GemmProblem(8, 64, 64), CUDA)
    assert [t.value for t in tactics] == [-1] + list(range(32))
    assert tactics[0].default and tactics[0].label == "default"
    assert tactics[0].config == tactics[22].config == "128x128x256-noswap-dp"  # -1 on SM120 runs t21
    assert (tactics[22].label, tactics[22].default) == ("t21", False)


# -- _gating helpers ----------------------------------------------------------------------------

def test_arch_reason_and_format():
    h200, b200 = _gating.DeviceInfo(9, 0, "NVIDIA H200"), _gating.DeviceInfo(10, 0, "NVIDIA B200")
    assert _gating.format_sms({120, 100, 103}) == "SM100/103/120"
    assert _gating.arch_reason(None, {100}) == "no CUDA device"
    assert _gating.arch_reason(b200, {100, 120}) is None
    assert _gating.arch_reason(h200, {100}, "B200/B300") == "needs SM100 (B200/B300); this GPU is SM90 (NVIDIA H200)"
    assert _gating.DeviceInfo(12, 1, "GB10").sm == 121
    assert _gating.device_info("cpu") is None


def test_versions_without_import():
    import importlib.metadata

    # the first installed one of the names; metadata may drop the local "+cu130" tag
    assert _gating.dist_version("no-such-dist-xyz", "torch") == importlib.metadata.version("torch")
    assert torch.__version__.startswith(_gating.dist_version("torch"))
    assert _gating.dist_version("no-such-dist-xyz") is None
    assert _gating.module_installed("json")
    assert not _gating.module_installed("no_such_module_xyz")


def test_probe_import_in_a_child(tmp_path, monkeypatch):
    (tmp_path / "fp4b_probe_ok.py").write_text("X = 1\n")
    (tmp_path / "fp4b_probe_raises.py").write_text("raise ImportError('undefined symbol: _ZN3c10')\n")
    (tmp_path / "fp4b_probe_aborts.py").write_text("import os\nos.abort()\n")
    (tmp_path / "fp4b_probe_hangs.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert _gating.probe_import("fp4b_probe_ok") == _gating.ImportProbe(True)
    assert _gating.probe_import("fp4b_probe_raises").error == "ImportError: undefined symbol: _ZN3c10"
    crashed = _gating.probe_import("fp4b_probe_aborts")
    assert not crashed.ok and "crashed the interpreter (signal 6)" in crashed.error
    hung = _gating.probe_import("fp4b_probe_hangs", timeout_s=1.0)
    assert not hung.ok and "timed out" in hung.error
    assert "ModuleNotFoundError" in _gating.probe_import("fp4b_probe_missing").error


def test_probe_ignores_a_same_named_file_in_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "fp4b_shadow.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    probe = _gating.probe_import("fp4b_shadow")
    assert not probe.ok and "ModuleNotFoundError" in probe.error


def test_sglang_kernel_without_the_fp4_ops_names_the_missing_op(monkeypatch):
    """sglang-kernel 0.4.10 (sgl-kernel's successor) imports but registers neither FP4 GEMM op:
    the skip names the package, its version and the missing op, not an import failure."""
    import types

    pretend(monkeypatch, "B200")
    versions = {"sglang-kernel": "0.4.10"}
    monkeypatch.setattr(_gating, "dist_version", lambda *names: next((versions[n] for n in names if n in versions), None))
    monkeypatch.setattr(_gating, "module_installed", lambda name: True)
    monkeypatch.setattr(_gating, "probe_import", lambda name: _gating.ImportProbe(True))
    mod = types.ModuleType("sgl_kernel")
    mod.__version__ = "0.4.10"
    monkeypatch.setitem(sys.modules, "sgl_kernel", mod)
    monkeypatch.setattr(torch.ops, "sgl_kernel", types.SimpleNamespace(other_op=object()), raising=False)
    for cls, op in ((SglKernelDense, "cutlass_scaled_fp4_mm"), (SglKernelGroup, "cutlass_fp4_group_mm")):
        avail = cls().availability(CUDA)
        assert not avail.ok and avail.reason.startswith(f"sglang-kernel 0.4.10 has no {op}"), avail.reason
        assert "does not import" not in avail.reason
