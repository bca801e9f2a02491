"""fp4bench: a pytest-benchmark based regression gate for FP4 GEMM kernels in MoE inference.

Layers (each imports only from the ones before it):
formats -> models -> problems/workloads -> backends -> measure -> gate -> report -> plugin / cli.
"""

__version__ = "0.1.0"
