"""Whether a library quantizer writes the padding of its scale buffer (``verify_quant.padding_written``)."""

from __future__ import annotations

import torch

from fakes.quantize import FakeQuantizer
from fp4bench.backends.builtin._quant import QuantOutput
from fp4bench.measure.verify_quant import padding_written

CPU = torch.device("cpu")


def _call(q: FakeQuantizer, m: int, k: int):
    x = torch.randn(m, k, dtype=torch.bfloat16)
    gs = torch.tensor([448.0 * 6 / float(x.abs().max())], dtype=torch.float32)

    def run() -> QuantOutput:
        data, sf = q.scaled_fp4_quant(x, gs)
        return QuantOutput(data, sf, gs)
    return run


def test_a_quantizer_that_writes_zeros_is_written_and_one_that_leaves_them_is_not():
    assert padding_written(_call(FakeQuantizer(), 5, 64), 5, 4, "128x4", CPU) == "written"
    got = padding_written(_call(FakeQuantizer(stale_padding=0x5A), 5, 64), 5, 4, "128x4", CPU)
    assert got == f"not written: {128 * 4 - 5 * 4} of {128 * 4 - 5 * 4} padding bytes are not 0"
    # rows a multiple of 128 and K/16 of 4: nothing to write
    assert padding_written(_call(FakeQuantizer(stale_padding=0x5A), 128, 64), 128, 4, "128x4", CPU) == "none"
    assert padding_written(_call(FakeQuantizer(), 5, 64), 5, 4, "linear", CPU) == "none"
