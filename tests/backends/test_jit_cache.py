"""``fp4bench.backends.jit_cache``: a FlashInfer case whose JIT module is not built skips, naming `fp4bench prepare`."""

from __future__ import annotations

import sys
import types

import pytest

from fp4bench.backends import jit_cache


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


def _flashinfer_backends() -> dict[str, set[tuple[int, int]]]:
    """Every registered backend whose adapter module drives FlashInfer -> the (major, minor) it supports."""
    from fp4bench.backends import registry

    out = {}
    for b in registry.all_backends():
        mod = sys.modules[type(b).__module__]
        if not (type(b).__module__.startswith("fp4bench.backends.flashinfer") or "flashinfer" in b.name):
            continue
        if hasattr(b, "_parts"):  # an end-to-end row runs where both its quantizer and its GEMM run
            ccs = set.intersection(*(set(getattr(sys.modules[type(p).__module__], "SUPPORTED_SMS")) for p in b._parts()))
        else:
            ccs = getattr(b, "supported_ccs", None) or getattr(mod, "SUPPORTED_SMS")
        out[b.name] = {(cc // 10, cc % 10) for cc in ccs}
    return out


def test_every_flashinfer_backend_is_guarded_on_every_capability_it_supports():
    """Derived from the registry: a renamed or new FlashInfer backend cannot escape the guard."""
    backends = _flashinfer_backends()
    assert {"flashinfer-cutlass", "flashinfer-cutlass-moe", "flashinfer-cutlass-moe-nvfp4"} <= set(backends)
    missing = [(name, cap) for name, caps in backends.items() for cap in sorted(caps) if name not in jit_cache.NO_JIT
               and not any(name in names for _, names, _ in jit_cache._SPECS.get(cap, []))]
    assert not missing, f"FlashInfer backends with no JIT module in jit_cache._SPECS: {missing}"
    names = {n for specs in jit_cache._SPECS.values() for _, ns, _ in specs for n in ns}
    assert names <= set(backends), f"_SPECS names backends that do not exist: {names - set(backends)}"


@pytest.mark.parametrize("cap, gen", [((10, 0), "sm100"), ((11, 0), "sm100"), ((10, 3), "sm103"),
                                      ((12, 0), "sm120"), ((12, 1), "sm120")])
def test_prepare_builds_the_blackwell_fused_moe_module_flashinfer_loads(monkeypatch, cap, gen):
    """``fp4bench prepare --backends flashinfer-cutlass-moe-nvfp4`` builds ``fused_moe_<arch>``, the
    module ``get_cutlass_fused_moe_module`` loads for that capability."""
    specs = {}
    moe = types.ModuleType("flashinfer.jit.fused_moe")
    for arch in ("sm90", "sm100", "sm103", "sm120"):
        specs[arch] = _Spec(built=False)
        setattr(moe, f"gen_cutlass_fused_moe_{arch}_module", lambda a=arch: specs[a])
    env = types.SimpleNamespace(FLASHINFER_JIT_DIR="/cache/cached_ops")
    jit = types.ModuleType("flashinfer.jit")
    jit.env = env
    for name, mod in {"flashinfer": types.ModuleType("flashinfer"), "flashinfer.jit": jit,
                      "flashinfer.jit.fused_moe": moe}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv(jit_cache.ALLOW_ENV, raising=False)
    assert "is not built" in jit_cache.unbuilt_reason("flashinfer-cutlass-moe-nvfp4", cap)
    lines: list[str] = []
    jit_cache.prepare(cap, {"flashinfer-cutlass-moe-nvfp4"}, echo=lines.append)
    assert {a: s.builds for a, s in specs.items()} == {a: int(a == gen) for a in specs}, lines
    assert jit_cache.unbuilt_reason("flashinfer-cutlass-moe-nvfp4", cap) == ""


# --- a GPU test whose library module cannot be loaded skips, as the backends' cases do -----------------

def _missing_jit_flashinfer(monkeypatch) -> types.ModuleType:
    """A ``flashinfer`` whose fp4 helper raises as 0.7.x does on an H100 with ``FLASHINFER_DISABLE_JIT=1``
    and no prebuilt ``fp4_quantization_90``: ``flashinfer.jit.core.MissingJITCacheError`` (a
    ``RuntimeError`` taking the message and the module's JitSpec)."""
    core = types.ModuleType("flashinfer.jit.core")

    class MissingJITCacheError(RuntimeError):
        def __init__(self, message: str, spec=None):
            self.spec = spec
            super().__init__(message)

    MissingJITCacheError.__module__ = core.__name__
    core.MissingJITCacheError = MissingJITCacheError
    fi = types.ModuleType("flashinfer")

    def block_scale_interleave(sf):
        raise MissingJITCacheError("JIT compilation is disabled and the JIT cache does not contain the module "
                                   "fp4_quantization_90\nset FLASHINFER_DISABLE_JIT=0 to build it", spec="fp4_quantization_90")

    fi.block_scale_interleave = block_scale_interleave
    for name, mod in {"flashinfer": fi, "flashinfer.jit.core": core}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return fi


def test_a_gpu_test_whose_flashinfer_module_is_missing_skips_with_the_library_reason(monkeypatch):
    from fakes.library_modules import loaded_or_skip

    fi = _missing_jit_flashinfer(monkeypatch)
    with pytest.raises(pytest.skip.Exception) as skipped:
        loaded_or_skip("FlashInfer's fp4 helper module", lambda: fi.block_scale_interleave(None))
    assert str(skipped.value) == ("FlashInfer's fp4 helper module cannot be loaded or built here (MissingJITCacheError: "
                                  "JIT compilation is disabled and the JIT cache does not contain the module "
                                  "fp4_quantization_90)")


@pytest.mark.parametrize("exc", [RuntimeError("CUDA error: an illegal memory access"), ValueError("bad scales"),
                                 type("MissingJITCacheError", (RuntimeError,), {})("not flashinfer's")])
def test_any_other_error_of_a_gpu_test_is_raised_not_skipped(exc):
    """A library's wrong answer or crash is the test's failure; only a module that cannot be
    loaded or built skips (a class of that name from another package is not FlashInfer's)."""
    from fakes.library_modules import loaded_or_skip

    def load():
        raise exc

    with pytest.raises(type(exc)):
        loaded_or_skip("FlashInfer's fp4 helper module", load)
    assert loaded_or_skip("a module", lambda: 42) == 42
    with pytest.raises(pytest.skip.Exception, match=r"a module cannot be loaded or built here \(OSError: libcuda"):
        loaded_or_skip("a module", lambda: (_ for _ in ()).throw(OSError("libcudart.so.13: cannot open")))
