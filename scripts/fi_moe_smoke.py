#!/usr/bin/env python3
"""H200 smoke test: FlashInfer's SM90 BF16 x MXFP4 fused MoE through fp4bench's backend.

1. installs the prebuilt modules (scripts/fi_build_moe_sm90.sh) where FlashInfer looks for AOT
   modules (``<flashinfer>/data/aot/<name>/<name>.so``), so ``flashinfer.cutlass_fused_moe`` and
   the interleave helper load them instead of JIT-compiling (``FLASHINFER_DISABLE_JIT=1`` makes
   a missing module an error, never a 30-minute compile);
2. lists the GEMM1/GEMM2 tactic counts (and checks them against the derived label table);
3. checks fp4bench's torch models of the SM90 weight/scale interleave against the real helpers;
4. runs every tactic once (sweep policy: each GEMM1 tactic with the default GEMM2 and vice
   versa) on small GLM-5-like problems and checks each output against ``reference_moe``
   (NaN/sentinel poisoning via ``measure.verify.check_case``, bound ``moe_error_bound``);
5. runs FlashInfer's SM90-safe helpers ``block_scale_interleave`` and
   ``e2m1_and_ufp8sf_scale_to_float`` as oracles for ``fp4bench.formats`` swizzle / dequantize.

Prints one compact summary table; writes ``$OUT/fi_moe_smoke.json`` when ``OUT`` is set.
Exit status 0 only if the module loaded, the layouts matched and no tactic produced a wrong
result (tactics the library cannot run for a shape are data, not failures).

    PYTHONPATH=/tmp/site:src python scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", "/tmp/fimoe_ws")

RESULT: dict = {"steps": {}, "problems": [], "oracles": {}, "errors": []}


def log(msg: str) -> None:
    print(msg, flush=True)


def step(name: str):
    """Decorator-free timing helper: ``with step("x"):`` records seconds and any exception."""

    class _Step:
        def __enter__(self):
            self.t = time.perf_counter()
            log(f"-- {name}")
            return self

        def __exit__(self, et, ev, tb):
            RESULT["steps"][name] = {"s": round(time.perf_counter() - self.t, 2), "ok": et is None}
            if et is not None:
                RESULT["errors"].append(f"{name}: {et.__name__}: {ev}")
                log("".join(traceback.format_exception(et, ev, tb))[-3000:])
            return et is not None and et is not KeyboardInterrupt  # keep going

    return _Step()


def preload_nvrtc() -> str | None:
    """The MoE module links libnvrtc.so.13 (DeepGEMM JIT); load one globally if ld.so can't."""
    try:
        ctypes.CDLL("libnvrtc.so.13", mode=ctypes.RTLD_GLOBAL)
        return "ld.so"
    except OSError:
        pass
    pats = [f"{p}/nvidia/cu13/lib/libnvrtc.so.13*" for p in sys.path if p] + \
           [f"{p}/nvidia/cuda_nvrtc/lib/libnvrtc.so.13*" for p in sys.path if p] + \
           ["/usr/local/cuda*/lib64/libnvrtc.so.13*", "/usr/local/cuda*/targets/*/lib/libnvrtc.so.13*"]
    for pat in pats:
        for cand in sorted(glob.glob(pat)):
            try:
                ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                return cand
            except OSError:
                continue
    return None


def install_aot(so: Path, name: str) -> str:
    import flashinfer.jit.env as env

    dst = env.FLASHINFER_AOT_DIR / name / f"{name}.so"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(so, dst)
    return str(dst)


def glm5_problem(tokens: int, inter: int, seed: int):
    """GLM-5 layer (H 6144, 256 experts, top-8; I = 2048 / TP) with seeded uniform routing."""
    import torch

    from fp4bench.problems import MoEProblem, Origin

    g = torch.Generator().manual_seed(seed)
    ids = tuple(tuple(torch.randperm(256, generator=g)[:8].tolist()) for _ in range(tokens))
    return MoEProblem(hidden=6144, inter=inter, num_experts=256, top_k=8, topk_ids=ids,
                      origin=Origin(model="glm-5", batch=tokens, tp=2048 // inter, role="moe"))


def time_us(fn, iters: int = 5) -> float:
    import torch

    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return sorted(times)[len(times) // 2]


def run_problem(problem, dev, args) -> dict:
    import torch

    from fp4bench.backends.base import TacticUnsupported
    from fp4bench.backends.flashinfer_moe import FlashInferCutlassMoEW4A16
    from fp4bench.measure.verify import check_case
    from fp4bench.operands import make_operands
    from fp4bench.reference_moe import moe_error_bound, unquantized_moe

    be = FlashInferCutlassMoEW4A16()
    info = {"problem": problem.id, "availability": be.availability(dev).reason,
            "unsupported": be.unsupported_reason(problem), "tactics": []}
    if info["unsupported"]:
        return info
    t = time.perf_counter()
    ops = make_operands(problem, be.act_format, be.weight_format, device=dev, seed=args.seed)
    prep = be.prepare(problem, ops, dev)
    ref = be.reference(prep, ops)
    bound = moe_error_bound(ops, ref, be.intermediate)
    e2e = unquantized_moe(ops)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    info["prepare_s"] = round(time.perf_counter() - t, 2)
    tactics = be.tactics(problem, dev)
    if args.max_tactics:
        tactics = tactics[: args.max_tactics]
    for tac in [None] + tactics:
        from fp4bench.backends.base import DEFAULT_TACTIC

        tac = tac or DEFAULT_TACTIC
        row = {"tactic": tac.label, "value": tac.value}
        try:
            res = check_case(lambda: be.run(prep, tac), prep.out, ref, bound, unquantized=e2e)
            err = (prep.out.float() - ref).abs()
            tight = err <= 2 ** -8 * ref.abs() + 2 ** -12 * float(ref.abs().max())
            row.update(res.to_extra_info())
            row["tight_frac"] = round(float(tight.float().mean()), 5)
            row["status"] = "ok" if res.ok and row["tight_frac"] >= 0.999 else "WRONG"
            if args.time:
                row["us"] = round(time_us(lambda: be.run(prep, tac)), 1)
        except TacticUnsupported as exc:
            row["status"], row["reason"] = "unsupported", str(exc)[:300]
        except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
            row["status"], row["reason"] = "error", f"{type(exc).__name__}: {exc}"[:300]
        info["tactics"].append(row)
    return info


def oracles(dev) -> dict:
    """FlashInfer's SM90-safe fp4 helpers vs fp4bench.formats (same bytes in, compare out)."""
    import torch

    import flashinfer
    from fp4bench import formats

    out: dict = {}
    g = torch.Generator(device=dev).manual_seed(7)
    for r, c in ((150, 6), (128, 8), (7, 448)):
        sf = torch.randint(0, 256, (r, c), dtype=torch.uint8, device=dev, generator=g)
        got = flashinfer.block_scale_interleave(sf).reshape(-1)
        want = formats.swizzle_128x4(sf).reshape(-1)
        out[f"block_scale_interleave[{r}x{c}]"] = bool(torch.equal(got.cpu(), want.cpu()))
    def close(got, want) -> dict:
        # FlashInfer's host decode multiplies by the dequant scale 1/gs; ours divides by gs:
        # fl(1/gs) and the product each round once, so the two may differ by ~2 fp32 roundings.
        got, want = got.cpu().float(), want.cpu().float()
        rel = float(((got - want).abs() / want.abs().clamp_min(1e-30)).max()) if want.numel() else 0.0
        return {"exact": bool(torch.equal(got, want)), "max_rel": rel, "ok": rel <= 2.0 ** -22}

    x = torch.randn((96, 256), device=dev, dtype=torch.bfloat16, generator=g)
    q = formats.nvfp4_quantize(x)
    for swz in (True, False):
        sf = formats.swizzle_128x4(q.scales) if swz else q.scales
        got = flashinfer.e2m1_and_ufp8sf_scale_to_float(
            q.data, sf.view(torch.uint8).reshape(-1), (1.0 / q.global_scale).reshape(1).float(),
            sf_vec_size=16, ufp8_type=1, is_sf_swizzled_layout=swz)
        out[f"e2m1_and_ufp8sf_scale_to_float[nvfp4,swizzled={swz}]"] = close(got, formats.nvfp4_dequantize(q))
    m = formats.mxfp4_quantize(x)
    got = flashinfer.e2m1_and_ufp8sf_scale_to_float(
        m.data, formats.swizzle_128x4(m.scales).reshape(-1), torch.ones(1), sf_vec_size=32,
        ufp8_type=0, is_sf_swizzled_layout=True)
    out["e2m1_and_ufp8sf_scale_to_float[mxfp4,swizzled=True]"] = close(got, formats.mxfp4_dequantize(m))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--so-dir", type=Path, default=REPO / ".devbundle" / "fi_moe",
                    help="folder with fused_moe_90_w4a16.so (and fp4_quantization_90.so)")
    ap.add_argument("--jit", action="store_true", help="allow FlashInfer to JIT-build missing modules")
    ap.add_argument("--tokens", type=int, nargs="+", default=[16])
    ap.add_argument("--inter", type=int, nargs="+", default=[256, 1024], help="I per rank (TP8, TP2)")
    ap.add_argument("--max-tactics", type=int, default=0, help="0 = all")
    ap.add_argument("--time", action="store_true", help="also time each tactic (5 launches, median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-oracles", action="store_true")
    args = ap.parse_args()

    import torch

    dev = torch.device("cuda")
    RESULT["env"] = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                     "gpu": torch.cuda.get_device_name(dev), "cc": list(torch.cuda.get_device_capability(dev))}
    RESULT["nvrtc"] = preload_nvrtc()
    if not args.jit:
        os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    with step("install prebuilt modules"):
        RESULT["installed"] = {}
        for so, name in (("fused_moe_90_w4a16.so", "fused_moe_90"), ("fp4_quantization_90.so", "fp4_quantization_90")):
            if (args.so_dir / so).exists():
                RESULT["installed"][name] = install_aot(args.so_dir / so, name)
        log(f"   {RESULT['installed']}")
    with step("import flashinfer + load fused_moe_90"):
        import flashinfer
        from flashinfer.fused_moe.core import get_cutlass_fused_moe_module

        RESULT["env"]["flashinfer"] = flashinfer.__version__
        get_cutlass_fused_moe_module("90")
    loaded = RESULT["steps"]["import flashinfer + load fused_moe_90"]["ok"]
    if loaded:
        with step("tactic counts"):
            from fp4bench.backends.flashinfer_moe import FlashInferMoEApi, sm90_w4a16_tactic_descriptions

            r = FlashInferMoEApi().tactic_runner("90", torch.bfloat16, torch.uint8, 8, True)
            n1, n2 = int(r.get_gemm1_tactic_count()), int(r.get_gemm2_tactic_count())
            occ = [int(r.get_tactic_occupancy(t)) for t in range(n1 + n2)]
            RESULT["tactics"] = {"gemm1": n1, "gemm2": n2, "total": int(r.get_tactic_num()),
                                 "derived_table": len(sm90_w4a16_tactic_descriptions()),
                                 "zero_occupancy": [t for t, o in enumerate(occ) if o <= 0]}
            log(f"   {RESULT['tactics']}")
        with step("layout models vs real helpers"):
            from fp4bench.backends import flashinfer_moe as fim

            g = torch.Generator(device=dev).manual_seed(3)
            w = torch.randint(0, 256, (3, 512, 1024), dtype=torch.uint8, device=dev, generator=g)
            real_w = FlashInferMoEApi().interleave_weights(w)
            s = torch.randint(0, 256, (3, 512, 64), dtype=torch.uint8, device=dev, generator=g)
            real_s = FlashInferMoEApi().interleave_scales(s)
            RESULT["layout"] = {
                "weights_equal": bool(torch.equal(real_w, fim.sm90_interleave_fp4_weights(w))),
                "weights_bytes_differing": int((real_w != fim.sm90_interleave_fp4_weights(w)).sum()),
                "scales_equal": bool(torch.equal(real_s, fim.sm90_interleave_mxfp4_scales(s))),
            }
            log(f"   {RESULT['layout']}")
        for inter in args.inter:
            for tokens in args.tokens:
                with step(f"sweep T={tokens} I={inter}"):
                    RESULT["problems"].append(run_problem(glm5_problem(tokens, inter, args.seed), dev, args))
    if not args.skip_oracles:
        with step("fp4 helper oracles"):
            if not args.jit and "fp4_quantization_90" not in RESULT.get("installed", {}):
                os.environ.pop("FLASHINFER_DISABLE_JIT", None)  # 7 sources, about a minute
            RESULT["oracles"] = oracles(dev)
            log(f"   {RESULT['oracles']}")
    return summarize()


def _ok(v) -> bool:
    return v if isinstance(v, bool) else bool(v["ok"])


def summarize() -> int:
    lines = ["", "=== fi_moe_smoke summary ===",
             f"env: {RESULT.get('env')}", f"nvrtc: {RESULT.get('nvrtc')}",
             "steps: " + ", ".join(f"{k} {v['s']}s{'' if v['ok'] else ' FAILED'}" for k, v in RESULT["steps"].items())]
    if "tactics" in RESULT:
        lines.append(f"tactics: {RESULT['tactics']}")
    if "layout" in RESULT:
        lines.append(f"layout: {RESULT['layout']}")
    bad = 0
    lines.append(f"{'problem':58s} {'ok':>4s} {'unsup':>5s} {'WRONG':>5s} {'err':>4s} {'max_rel_err':>11s} {'bound':>6s} "
                 f"{'e2e_cos':>7s} {'best us':>8s}")
    for p in RESULT["problems"]:
        rows = p.get("tactics", [])
        n = {k: sum(r["status"] == k for r in rows) for k in ("ok", "unsupported", "WRONG", "error")}
        bad += n["WRONG"] + n["error"]
        okr = [r for r in rows if r["status"] == "ok"]
        mre = max((r["max_rel_err"] or 0 for r in okr), default=float("nan"))
        wbr = max((r["worst_bound_ratio"] or 0 for r in okr), default=float("nan"))
        cos = min((r["e2e_cosine"] or 1 for r in okr), default=float("nan"))
        best = min((r.get("us", float("inf")) for r in okr), default=float("inf"))
        best_s = "-" if best == float("inf") else f"{best:.1f}"
        lines.append(f"{p['problem'][:58]:58s} {n['ok']:4d} {n['unsupported']:5d} {n['WRONG']:5d} {n['error']:4d} "
                     f"{mre:11.2e} {wbr:6.3f} {cos:7.4f} {best_s:>8s}")
        for r in rows:
            if r["status"] in ("WRONG", "error"):
                lines.append(f"   {r['status']}: {r['tactic']} {r.get('check_detail') or r.get('reason', '')}")
        reasons: dict[str, int] = {}
        for r in rows:
            if r["status"] == "unsupported":
                key = r["reason"].split(": ", 1)[-1][:90]
                reasons[key] = reasons.get(key, 0) + 1
        for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]:
            lines.append(f"   unsupported x{v}: {k}")
    if RESULT["oracles"]:
        lines.append("oracles: " + ", ".join(f"{k}={'ok' if _ok(v) else 'MISMATCH'}{'' if isinstance(v, bool) else ' exact' if v['exact'] else ' max_rel %.1e' % v['max_rel']}"
                                             for k, v in RESULT["oracles"].items()))
    for e in RESULT["errors"]:
        lines.append(f"ERROR {e[:400]}")
    layout_ok = RESULT.get("layout", {}).get("weights_equal") and RESULT.get("layout", {}).get("scales_equal")
    oracle_ok = all(_ok(v) for v in RESULT["oracles"].values())
    ok = not RESULT["errors"] and bad == 0 and bool(layout_ok) and oracle_ok and bool(RESULT["problems"])
    lines.append(f"RESULT: {'PASS' if ok else 'FAIL'}")
    log("\n".join(lines))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        Path(os.environ["OUT"], "fi_moe_smoke.json").write_text(json.dumps(RESULT, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
