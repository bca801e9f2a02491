"""Fake ``flashinfer`` package (test-only): the entry points fp4bench loads, backed by the fakes."""

from fp4sim_world import DENSE

__version__ = DENSE.version


class _MmFp4:
    """``flashinfer.mm_fp4`` as far as ``is_backend_supported`` goes (gemm_base.py)."""

    @staticmethod
    def is_backend_supported(backend: str, sm: int) -> bool:
        return backend == "cutlass" and sm in DENSE.supported_sms


mm_fp4 = _MmFp4()

from flashinfer.fp4_quantization import SfLayout, fp4_quantize, nvfp4_quantize  # noqa: E402,F401
