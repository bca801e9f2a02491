"""Fake ``flashinfer.cute_dsl.utils``: ``convert_sf_to_mma_layout`` (``fakes.flashinfer_b12x_moe``)."""

from fakes.flashinfer_b12x_moe import convert_sf_to_mma_layout  # noqa: F401
