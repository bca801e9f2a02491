"""Fake ``flashinfer.cute_dsl`` package: the scale-layout helper the b12x fused-MoE row uses."""
