"""Bit-exact check of a library quantizer's bytes against ``fp4bench.formats``, failures named.

Order (the first that applies names the case): the global scale (fp32 bits), then the block
scales (the ``[M, K/16]`` region of the GEMM's layout: padding is not compared, sgl_kernel
leaves padded rows uninitialized), then the payload codes.

* ``wrong global scale``: the fp32 encode scale handed to the GEMM differs in any bit.
* ``all-zero scales``: one or more rows whose scale bytes are all 0 where ours are not (the
  FlashInfer #3398 pattern); the rows are named as bands.
* ``wrong scales``: any other scale byte differs, or the buffer is not the layout's size.
* ``wrong payload``: an E2M1 code differs. In a block whose scale is 0 the codes 0x0 (+0) and
  0x8 (-0) both decode to 0 and are accepted (a kernel multiplies by a zero output scale and may
  keep the sign); nothing else is.

Exactness is the rule, not a tolerance: both sides follow the same recipe (docs/formats.md).
A kernel built with fast math (``rcp.approx``) may round a value within an ulp of an E2M1 tie
to the neighbouring code; the detail then counts the codes one step apart, so such a case reads
as what it is. NaN/Inf activations are never drawn (``fp4bench.formats`` refuses them); a NaN
scale byte (0x7F/0xFF) from the library differs from ours and is ``wrong scales``.
"""

from __future__ import annotations

from typing import Callable

import torch

from fp4bench import formats
from fp4bench.measure.verify import OK, CheckResult

WRONG_GLOBAL_SCALE = "wrong global scale"
ZERO_SCALES = "all-zero scales"
WRONG_SCALES = "wrong scales"
WRONG_PAYLOAD = "wrong payload"
QUANT_FAILURE_KINDS = (WRONG_GLOBAL_SCALE, ZERO_SCALES, WRONG_SCALES, WRONG_PAYLOAD)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(torch.uint8).reshape(-1).cpu() if t.element_size() == 1 else t.reshape(-1).cpu()


def _bands(rows: list[int], limit: int = 6) -> str:
    """``[384, 385, 386, 700]`` -> ``"384-386, 700"``."""
    spans: list[list[int]] = []
    for r in rows:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    text = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans[:limit])
    return text + (" ..." if len(spans) > limit else "")


def _linear_scales(buf: torch.Tensor, m: int, c: int, layout: str) -> torch.Tensor | str:
    """uint8 ``[m, c]`` scales read from the library's buffer, or why they cannot be read."""
    flat = _bytes(buf)
    if flat.dtype != torch.uint8:
        return f"scale buffer has dtype {buf.dtype}, not a 1-byte type"
    if layout == "128x4":
        need = formats.pad128(m) * formats.pad4(c)
        if flat.numel() != need:
            return f"scale buffer has {flat.numel()} bytes; the 128x4 layout of [{m}, {c}] has {need}"
        return formats.unswizzle_128x4(flat.reshape(formats.pad128(m), formats.pad4(c)), m, c)
    if layout == "linear":
        if flat.numel() != m * c:
            return f"scale buffer has {flat.numel()} bytes; the linear layout of [{m}, {c}] has {m * c}"
        return flat.reshape(m, c)
    raise ValueError(f"unknown scale layout {layout!r}")


def compare_quantized(got, expected: formats.NVFP4, layout: str) -> CheckResult:
    """Classify a ``QuantOutput``-like ``got`` (data, scales, global_scale) against ``expected``."""
    m, k = expected.shape[-2], expected.shape[-1]
    c = k // formats.NVFP4_BLOCK
    gs = torch.as_tensor(got.global_scale).detach().cpu()
    want_gs = expected.global_scale.detach().cpu().to(torch.float32).reshape(-1)
    if gs.dtype != torch.float32 or gs.numel() != 1 or not torch.equal(gs.reshape(-1).view(torch.int32),
                                                                       want_gs.view(torch.int32)):
        shown = gs.reshape(-1)[:1].tolist() if gs.numel() else []
        return CheckResult(WRONG_GLOBAL_SCALE, f"global scale {shown} ({gs.dtype}, {gs.numel()} element(s)); "
                                               f"expected {float(want_gs[0])!r} (float32)")
    lib = _linear_scales(got.scales, m, c, layout)
    if isinstance(lib, str):
        return CheckResult(WRONG_SCALES, lib)
    ours = expected.scales.detach().cpu().view(torch.uint8).reshape(m, c)
    zero_rows = ((lib == 0).all(dim=1) & (ours != 0).any(dim=1)).nonzero().flatten().tolist()
    if zero_rows:
        return CheckResult(ZERO_SCALES, f"{len(zero_rows)}/{m} rows have all-zero scale bytes where the "
                                        f"reference's are not: rows {_bands(zero_rows)} ({layout} layout)")
    bad = lib != ours
    if bool(bad.any()):
        rows = bad.any(dim=1).nonzero().flatten().tolist()
        return CheckResult(WRONG_SCALES, f"{int(bad.sum())}/{m * c} scale bytes differ ({layout} layout), "
                                         f"rows {_bands(rows)}")
    data = _bytes(got.data)
    if data.dtype != torch.uint8 or data.numel() != m * k // 2:
        return CheckResult(WRONG_PAYLOAD, f"payload has {data.numel()} elements of {got.data.dtype}; "
                                          f"expected {m * k // 2} bytes")
    mine = _bytes(expected.data).reshape(m, k // 2)
    data = data.reshape(m, k // 2)
    codes = torch.stack((data & 0xF, data >> 4), -1).reshape(m, c, formats.NVFP4_BLOCK)
    want = torch.stack((mine & 0xF, mine >> 4), -1).reshape(m, c, formats.NVFP4_BLOCK)
    zero_block = (ours == 0).unsqueeze(-1)
    signed_zero = zero_block & ((codes & 0x7) == 0) & (want == 0)
    diff = (codes != want) & ~signed_zero
    if bool(diff.any()):
        near = diff & ((codes & 0x8) == (want & 0x8)) & (((codes & 0x7).int() - (want & 0x7).int()).abs() == 1)
        rows = diff.any(dim=(1, 2)).nonzero().flatten().tolist()
        return CheckResult(WRONG_PAYLOAD, f"{int(diff.sum())}/{m * k} E2M1 codes differ ({int(near.sum())} of them "
                                          f"one code apart), rows {_bands(rows)}")
    return CheckResult(OK)


def check_quant(run: Callable[[], object], expected: formats.NVFP4, layout: str) -> CheckResult:
    """Run the quantizer once (it allocates its outputs) and compare its bytes."""
    return compare_quantized(run(), expected, layout)


def padding_written(run: Callable[[], object], m: int, c: int, layout: str, device: torch.device) -> str:
    """Whether the quantizer writes the padding of its 128x4 scale buffer (rows to 128, columns to
    4), which no check above compares: "none" (the layout has no padding here), "written" (every
    padding byte 0) or "not written: ..." (some padding byte not 0). Before the call a buffer of
    the scale buffer's size is filled with ``formats.POISON_BYTE`` and freed, so an ``empty``
    allocation of the library likely reuses those bytes (a caching allocator hands a freed block
    of the size back) and padding it leaves alone reads as not written. A GEMM fed by a quantizer
    that does not write its padding must not read it: ``reads scale padding`` checks that side."""
    if layout != "128x4":
        return "none"
    total = formats.pad128(m) * formats.pad4(c)
    if total == m * c:
        return "none"
    dirty = torch.full((total,), formats.POISON_BYTE, dtype=torch.uint8, device=device)
    del dirty
    flat = _bytes(run().scales)
    if flat.dtype != torch.uint8 or flat.numel() != total:
        return f"unknown: scale buffer of {flat.numel()} {flat.dtype} elements"
    used = torch.zeros(total, dtype=torch.bool)
    r, col = torch.meshgrid(torch.arange(m), torch.arange(c), indexing="ij")
    used[formats.sf_offset_128x4(r.flatten(), col.flatten(), c)] = True
    pad = flat[~used]
    nonzero = int((pad != 0).sum())
    if nonzero == 0:
        return "written"
    return f"not written: {nonzero} of {pad.numel()} padding bytes are not 0"
