"""``fp4bench shapes --gpu``: the detected GPU by default, short names, the known names in errors and help,
and each GPU's memory type as its cited datasheet source names it."""

from __future__ import annotations

import pytest

from fp4bench.cli import shapes as cli_shapes
from fp4bench.measure.peaks import PEAKS, gpu_by_name, known_gpus

#: memory per GPU: NVIDIA datasheets (H100/H200: HBM3/HBM3e; B200/GB200/B300/GB300: HBM3e;
#: RTX PRO 6000 Blackwell: 96 GB GDDR7 with ECC; GeForce RTX 5090: 32 GB GDDR7)
MEMORY = {"h100": "HBM3", "h200": "HBM3e", "b200": "HBM3e", "gb200": "HBM3e", "b300": "HBM3e", "gb300": "HBM3e",
          "rtx-pro-6000": "GDDR7", "rtx-5090": "GDDR7"}


def test_every_gpu_has_its_datasheet_memory_type():
    assert {p.short_name: p.memory_type for p in PEAKS} == MEMORY


@pytest.mark.parametrize("text,name", [("rtx-pro-6000", "RTX PRO 6000 Blackwell"), ("RTX PRO 6000", "RTX PRO 6000 Blackwell"),
                                       ("b200", "B200"), ("b300", "B300"), ("h200", "H200 SXM"),
                                       ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell")])
def test_short_and_reported_names(text, name):
    assert gpu_by_name(text).name == name


def test_shapes_prints_the_memory_type_of_the_gpu(capsys):
    assert cli_shapes.shapes_main(["--gpu", "rtx-pro-6000", "--batches", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("RTX PRO 6000 Blackwell: ridge point") and "GDDR7 1.792 TB/s" in first and "HBM" not in first


def test_unknown_gpu_is_a_usage_error_naming_the_known_ones(capsys):
    assert cli_shapes.shapes_main(["--gpu", "a100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU 'a100'; known: " + ", ".join(known_gpus()) in err


def test_default_is_the_detected_gpu(monkeypatch, capsys):
    monkeypatch.setattr(cli_shapes, "detected_gpu", lambda: "NVIDIA H200")
    assert cli_shapes.shapes_main(["--batches", "1"]) == 0
    assert capsys.readouterr().out.startswith("H200 SXM: ridge point n/a")
    monkeypatch.setattr(cli_shapes, "detected_gpu", lambda: None)
    assert cli_shapes.shapes_main(["--batches", "1"]) == 0
    assert capsys.readouterr().out.startswith("no GPU detected: no ridge point (give --gpu, one of h100, h200, b200")


def test_help_lists_the_known_gpus(capsys):
    assert cli_shapes.shapes_main(["--help"]) == 0
    assert "rtx-pro-6000" in " ".join(capsys.readouterr().out.split())
