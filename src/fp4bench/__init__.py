"""fp4bench: a pytest-benchmark based regression gate for FP4 GEMM kernels in MoE inference.

One package per concept, in layers; the table is in docs/architecture.md.
"""

__version__ = "0.1.0"
