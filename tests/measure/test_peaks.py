"""GPU peak table: numbers vs vendor datasheets, sources, name matching, overrides, roofline."""

from __future__ import annotations

import json

import pytest

from fp4bench.measure.peaks import (
    PEAK_FIELDS,
    PEAKS,
    SOURCE_TAGS,
    GpuPeaks,
    Roofline,
    peak_for,
    percent_of_peak,
    shares_of_peak,
)

# datasheet table: name torch reports -> (table entry, FP4, FP8, BF16 dense TFLOP/s, TB/s, GB)
DOC = {
    "NVIDIA H100 80GB HBM3": ("H100 SXM", None, 1979, 989, 3.35, 80),
    "NVIDIA H200": ("H200 SXM", None, 1979, 989, 4.8, 141),
    "NVIDIA B200": ("B200", 9000, 4500, 2250, 8.0, 180),
    "NVIDIA GB200": ("GB200", 10000, 5000, 2500, 8.0, 186),
    "NVIDIA B300 SXM6 AC": ("B300", 14000, 4500, 2250, 8.0, 288),
    "NVIDIA GB300": ("GB300", 15000, 5000, 2500, 8.0, 288),
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": ("RTX PRO 6000 Blackwell", 2000, 1000, 500, 1.792, 96),
    "NVIDIA GeForce RTX 5090": ("RTX 5090", 1676, 838.5, 419, 1.792, 32),
}


@pytest.mark.parametrize("torch_name", sorted(DOC))
def test_peaks_match_doc(torch_name):
    p = peak_for(torch_name)
    assert p is not None
    got = (p.name, p.fp4_tflops, p.fp8_tflops, p.bf16_tflops, p.bandwidth_tbs, p.memory_gb)
    assert got == DOC[torch_name]


def test_table_covers_the_documented_gpus():
    assert {p.name for p in PEAKS} == {v[0] for v in DOC.values()}


@pytest.mark.parametrize("peaks", PEAKS, ids=lambda p: p.name)
def test_every_number_has_a_tagged_source(peaks):
    for f in (*PEAK_FIELDS, "memory_gb"):
        value = getattr(peaks, f)
        if value is None:
            continue
        src = peaks.sources.get(f, "")
        assert src.strip(), f"{peaks.name}.{f}={value} has no source"
        assert any(t in src for t in SOURCE_TAGS), f"{peaks.name}.{f}: untagged {src!r}"


@pytest.mark.parametrize(
    "torch_name, entry",
    [
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell"),
        ("nvidia b200", "B200"),
        ("NVIDIA H100", "H100 SXM"),
        # look-alikes that must not get another GPU's peaks
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-80GB", None),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None),
        ("NVIDIA GeForce RTX 5090 D", None),
        ("NVIDIA GeForce RTX 5080", None),
        ("", None),
    ],
)
def test_name_matching(torch_name, entry):
    p = peak_for(torch_name)
    assert (p.name if p else None) == entry


def test_b200_and_gb200_are_not_confused():
    assert peak_for("NVIDIA GB200").name == "GB200"
    assert peak_for("NVIDIA B200").name == "B200"
    assert peak_for("NVIDIA GB300").name == "GB300"
    assert peak_for("NVIDIA B300 SXM6 AC").name == "B300"


def test_every_entry_matches_exactly_one_documented_name():
    for p in PEAKS:
        hits = [n for n in DOC if p.matches(n)]
        assert len(hits) == 1, (p.name, hits)


def test_ridge_points_match_doc():
    # doc "Ridge points" table
    assert peak_for("NVIDIA B200").ridge_point("nvfp4") == pytest.approx(1125)
    assert peak_for("NVIDIA GB300").ridge_point("nvfp4") == pytest.approx(1875)
    assert peak_for("NVIDIA H200").ridge_point("bf16") == pytest.approx(206, abs=0.5)
    assert peak_for("NVIDIA RTX PRO 6000 Blackwell Server Edition").ridge_point("mxfp4") == pytest.approx(1116, abs=1)
    assert peak_for("NVIDIA H200").ridge_point("nvfp4") is None  # no FP4 on SM90
    # "FP4 GEMM bandwidth-bound until M_e ≈ 316" on B200 (≈ 530 on GB300)
    # the ridge point over the weight-only intensity of one row, 2 / 0.5625 FLOP/B (NVFP4)
    assert peak_for("NVIDIA B200").ridge_point("nvfp4") / (2 / 0.5625) == pytest.approx(316, abs=1)
    assert peak_for("NVIDIA GB300").ridge_point("nvfp4") / (2 / 0.5625) == pytest.approx(527, abs=1)


def test_with_measured_overrides_and_records_source():
    table = peak_for("NVIDIA H200")
    m = table.with_measured(bf16_tflops=780.0, bandwidth_tbs=4.3, source="torch 8192^3 matmul")
    assert (m.bf16_tflops, m.bandwidth_tbs, m.fp8_tflops) == (780.0, 4.3, 1979)
    assert m.sources["bf16_tflops"] == "[measured] torch 8192^3 matmul"
    assert m.sources["fp8_tflops"] == table.sources["fp8_tflops"]
    assert table.bf16_tflops == 989  # the table entry itself is unchanged
    assert table.with_measured() is table


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(bf16=780.0), "cannot override \\['bf16'\\]"), (dict(bandwidth_tbs=0.0), "positive number"),
     (dict(fp4_tflops=float("nan")), "positive number"), (dict(l2_mb=-1), "positive number")],
)
def test_with_measured_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        peak_for("NVIDIA B200").with_measured(**kwargs)


def test_measured_json_file(tmp_path):
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps({"fp4_tflops": 7000.0, "bandwidth_tbs": 7.2, "source": "fp4bench calibrate"}))
    p = peak_for("NVIDIA B200", measured=path)
    assert (p.fp4_tflops, p.bandwidth_tbs, p.bf16_tflops) == (7000.0, 7.2, 2250)
    assert p.sources["bandwidth_tbs"] == "[measured] fp4bench calibrate"
    assert peak_for("NVIDIA B200", measured=str(path)) == p
    assert peak_for("NVIDIA B200", measured={"l2_mb": 126.0}).l2_mb == 126.0


def test_measured_json_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read measured peaks"):
        peak_for("NVIDIA B200", measured=bad)
    with pytest.raises(ValueError, match="cannot read measured peaks"):
        peak_for("NVIDIA B200", measured=tmp_path / "missing.json")
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        peak_for("NVIDIA B200", measured=arr)
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"bandwidth": 7.0}))
    with pytest.raises(ValueError, match="cannot override \\['bandwidth'\\]"):
        peak_for("NVIDIA B200", measured=typo)


def test_percent_of_peak_arithmetic():
    b200 = peak_for("NVIDIA B200")
    # 1 TFLOP and 4 GB in 1 ms: 1000 TFLOP/s, 4 TB/s -> 1000/9000 of FP4 peak, 4/8 of bandwidth
    r = percent_of_peak(1e12, 4e9, 1e-3, b200, "nvfp4")
    assert isinstance(r, Roofline)
    assert r == pytest.approx((1000.0, 4.0, 100 * 1000 / 9000, 50.0))
    tflops, tbs, pc, pb = percent_of_peak(1e12, 4e9, 1e-3, b200, "bf16")  # unpacks like a tuple
    assert pc == pytest.approx(100 * 1000 / 2250) and pb == pytest.approx(50.0)


def test_percent_of_peak_unknown_peaks():
    h100 = peak_for("NVIDIA H100 80GB HBM3")
    r = percent_of_peak(2e12, 1e9, 1e-3, h100, "nvfp4")
    assert r.pct_compute is None and r.pct_bandwidth == pytest.approx(100 * 1.0 / 3.35)
    r = percent_of_peak(2e12, 1e9, 1e-3, peak_for("NVIDIA B200"), "fp32")  # no fp32 peak in the table
    assert r.pct_compute is None and r.pct_bandwidth == pytest.approx(100 * 1.0 / 8.0)
    r = percent_of_peak(2e12, 1e9, 1e-3, None, "nvfp4")
    assert r == (pytest.approx(2000.0), pytest.approx(1.0), None, None)


@pytest.mark.parametrize(
    "args, match",
    [((1e12, 1e9, 0.0), "seconds"), ((1e12, 1e9, -1.0), "seconds"), ((1e12, 1e9, float("inf")), "seconds"),
     ((-1.0, 1e9, 1.0), "non-negative"), ((1.0, -1e9, 1.0), "non-negative")],
)
def test_percent_of_peak_rejects_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        percent_of_peak(*args, peak_for("NVIDIA B200"), "nvfp4")


def test_percent_of_peak_rejects_unknown_format():
    with pytest.raises(ValueError, match="unknown format 'int8'"):
        percent_of_peak(1.0, 1.0, 1.0, peak_for("NVIDIA B200"), "int8")


def test_constructor_refuses_unsourced_numbers():
    base = dict(name="X", arch="sm100", fp4_tflops=1.0, fp8_tflops=None, bf16_tflops=None,
                bandwidth_tbs=1.0, memory_gb=1.0)
    with pytest.raises(ValueError, match="fp4_tflops=1.0 has no source"):
        GpuPeaks(**base, sources={"bandwidth_tbs": "[source] x", "memory_gb": "[source] x"})
    with pytest.raises(ValueError, match="lacks a trust tag"):
        GpuPeaks(**base, sources={"fp4_tflops": "a blog", "bandwidth_tbs": "[source] x", "memory_gb": "[source] x"})


def test_peak_for_rejects_non_string():
    with pytest.raises(ValueError, match="gpu_name must be a string"):
        peak_for(None)  # type: ignore[arg-type]


def test_shares_of_peak_compute_bandwidth_and_roof():
    b200 = peak_for("NVIDIA B200")
    bw, fp4 = b200.bandwidth_tbs, b200.peak_tflops("nvfp4")
    pc, pb, roof = shares_of_peak(fp4 / 2, bw / 4, b200, "nvfp4")
    assert pc == pytest.approx(50.0) and pb == pytest.approx(25.0)
    # intensity (fp4/2)/(bw/4) = 2*fp4/bw is past the ridge: the roof is the compute peak
    assert roof == pytest.approx(50.0)
    # memory-bound at half the HBM bandwidth: intensity 0.5 FLOP/B, the roof is 0.5 x bandwidth
    assert shares_of_peak(bw / 4, bw / 2, b200, "nvfp4").pct_roof == pytest.approx(50.0)
    assert shares_of_peak(None, None, b200, "nvfp4") == (None, None, None)
    assert shares_of_peak(1.0, 1.0, None, "nvfp4") == (None, None, None)
    assert shares_of_peak(1.0, 1.0, b200, "fp32").pct_compute is None  # no fp32 peak in the table
