"""The reference a kernel is held to, decoded from the very bytes it was fed: ``dense`` (GEMM and
grouped GEMM) and ``moe`` (the fused MoE layer)."""
