"""One venv per release: installed from a local wheel folder over the shared base environment,
imported, cached; a release that does not install is ReleaseBroken with pip's reason."""

from __future__ import annotations

import subprocess

import pytest

from fakes.bisect_releases import PACKAGE, call_s, wheel_folder
from fp4bench.bisect.search import ReleaseBroken
from fp4bench.bisect.venvs import READY, VenvBuilder, module_of


def test_module_names():
    assert module_of("FlashInfer_Python") == "flashinfer" and module_of("sgl-kernel") == "sgl_kernel"
    assert module_of("my-pkg") == "my_pkg"


def test_a_release_venv_shares_the_base_and_is_cached_a_broken_one_is_named(tmp_path):
    wheels = wheel_folder(tmp_path / "wheels", call_s("0.7.1", 0.08), broken=("0.7.2",))
    build = VenvBuilder(tmp_path / "venvs", PACKAGE, wheels=str(wheels), prepare=False,
                        pins={PACKAGE: "0.6.18.post1"})  # the package's own pin is the bisected one: dropped
    venv = build("0.7.1")
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import flashinfer, importlib.metadata as m, torch, packaging; "
                          "print(flashinfer.CALL_S, m.version('flashinfer-python'), torch.__file__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert float(out[0]) == pytest.approx(20e-6 * 1.08) and out[1] == "0.7.1"
    assert not out[2].startswith(str(venv))  # torch is the base's, not installed again
    mtime = (venv / READY).stat().st_mtime_ns
    assert build("0.7.1") == venv and (venv / READY).stat().st_mtime_ns == mtime  # cached
    with pytest.raises(ReleaseBroken, match=r"flashinfer-python 0\.7\.2: pip install failed .*flashinfer-missing"):
        build("0.7.2")
    assert not (build.folder("0.7.2") / READY).exists()
