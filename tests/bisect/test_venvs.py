"""What a release venv is built from (the real build is the end-to-end bisect test's)."""

from __future__ import annotations

import sys

from fp4bench.bisect.venvs import VenvBuilder, module_of


def test_module_names():
    assert module_of("FlashInfer_Python") == "flashinfer" and module_of("sgl-kernel") == "sgl_kernel"
    assert module_of("my-pkg") == "my_pkg"


def test_the_package_own_pin_is_dropped_and_the_folder_changes_with_the_pins(tmp_path, monkeypatch):
    monkeypatch.setattr(VenvBuilder, "base", lambda self: {"site": ["/base"], "python": "3.11"})
    a = VenvBuilder(tmp_path, "flashinfer-python", sys.executable, {"Flashinfer_Python": "0.7.1", "torch": "2.13"})
    b = VenvBuilder(tmp_path, "flashinfer-python", sys.executable, {"torch": "2.14"})
    assert a.pins == {"torch": "2.13"}
    assert a.folder("0.7.2").name.startswith("flashinfer-python-0.7.2-") and a.folder("0.7.2") != b.folder("0.7.2")
