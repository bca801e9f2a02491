"""``fp4bench.jit_cache``: a FlashInfer case whose JIT module is not built skips, naming `fp4bench prepare`."""

from __future__ import annotations

import sys
import types

import pytest

from fp4bench import jit_cache


class _Spec:
    def __init__(self, built: bool, aot: bool = False):
        self.is_compiled, self.is_aot, self.builds = built, aot, 0

    def get_library_path(self):
        return "/cache/cached_ops/fused_moe_90/fused_moe_90.so"

    def build_and_load(self):
        self.builds += 1
        self.is_compiled = True


@pytest.fixture
def fake_flashinfer(monkeypatch):
    spec = _Spec(built=False)
    env = types.SimpleNamespace(FLASHINFER_JIT_DIR="/cache/cached_ops")
    mods = {"flashinfer": types.ModuleType("flashinfer"), "flashinfer.jit": types.ModuleType("flashinfer.jit"),
            "flashinfer.jit.fused_moe": types.ModuleType("flashinfer.jit.fused_moe")}
    mods["flashinfer.jit"].env = env
    mods["flashinfer.jit.fused_moe"].gen_cutlass_fused_moe_sm90_module = lambda: spec
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv(jit_cache.ALLOW_ENV, raising=False)
    return spec


def test_unbuilt_module_skips_with_the_command_to_run(fake_flashinfer):
    reason = jit_cache.unbuilt_reason("flashinfer-cutlass-moe", (9, 0))
    assert "fused MoE (SM90) is not built" in reason and "fp4bench prepare" in reason and "/cache/cached_ops" in reason
    assert jit_cache.unbuilt_reason("torch-bf16", (9, 0)) == ""  # no JIT module: never skipped for it


def test_built_or_prebuilt_or_allowed_runs(fake_flashinfer, monkeypatch):
    fake_flashinfer.is_aot = True
    assert jit_cache.unbuilt_reason("flashinfer-cutlass-moe", (9, 0)) == ""
    fake_flashinfer.is_aot = False
    monkeypatch.setenv(jit_cache.ALLOW_ENV, "1")
    assert jit_cache.unbuilt_reason("flashinfer-cutlass-moe", (9, 0)) == ""


def test_prepare_builds_only_what_is_missing(fake_flashinfer):
    lines: list[str] = []
    assert jit_cache.prepare((9, 0), echo=lines.append) == 0
    assert fake_flashinfer.builds == 1 and "JIT cache: /cache/cached_ops" in lines[0]
    assert lines[-1].startswith("[1/1] fused MoE (SM90): built in")
    lines.clear()
    jit_cache.prepare((9, 0), echo=lines.append)
    assert fake_flashinfer.builds == 1 and "already built" in lines[-1]
    assert jit_cache.prepare((8, 0), echo=lines.append) == 0 and "nothing to build" in lines[-1]
