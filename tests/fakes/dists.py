"""Tiny fake distributions and venvs for driving the workflows' pip steps offline.

* ``make_wheel`` writes a pure-Python wheel (``METADATA``, ``WHEEL``, ``RECORD``, optional
  console scripts) by hand: no build backend, no network.
* This file is also a PEP 517 build backend (``build_wheel``/``build_editable``): a project
  whose ``pyproject.toml`` names it with ``backend-path`` builds with nothing to download.
* ``make_venv`` lays out a virtual environment the way ``python -m venv --without-pip`` does
  (``pyvenv.cfg``, ``bin/python``) and adds a ``bin/pip`` that runs this interpreter's pip on
  the venv's own interpreter: a venv in milliseconds instead of an ``ensurepip`` run per venv.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path


def make_wheel(out: Path, name: str, version: str, requires: tuple[str, ...] = (),
               files: dict[str, str] | None = None, scripts: dict[str, str] | None = None) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``out``; ``scripts`` maps a console
    script to ``module:function``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    body = dict(files or {})
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    body[f"{info}/METADATA"] = "\n".join(meta) + "\n"
    body[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: fakes\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if scripts:
        body[f"{info}/entry_points.txt"] = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    body[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in body) + f"{info}/RECORD,,\n"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in body.items():
            z.writestr(p, text)
    return path


def make_venv(where: Path) -> Path:
    """A venv at ``where`` whose ``bin/pip`` is this interpreter's pip run by the venv's own
    ``bin/python`` (as a venv's pip runs), from a folder that holds pip's package and nothing
    else: no distribution of this interpreter is seen as installed in the venv."""
    import pip as pip_package

    base = Path(getattr(sys, "_base_executable", sys.executable))
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (where / "lib" / ver / "site-packages").mkdir(parents=True, exist_ok=True)
    (where / "bin").mkdir(exist_ok=True)
    (where / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n"
                                      f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    for n in ("python", "python3"):
        if not (where / "bin" / n).exists():
            (where / "bin" / n).symlink_to(base)
    only_pip = where / "pip-only"
    only_pip.mkdir(exist_ok=True)
    if not (only_pip / "pip").exists():
        (only_pip / "pip").symlink_to(Path(pip_package.__file__).parent)
    pip = where / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{where}/bin/python" -c "import sys; sys.path.insert(0, \'{only_pip}\'); '
                   f'from pip._internal.cli.main import main; sys.exit(main())" "$@"\n')
    pip.chmod(0o755)
    return where


# --- PEP 517 backend: the project's name, version and console scripts come from environment
# variables FAKE_NAME, FAKE_VERSION, FAKE_MODULE (a file in the project) and FAKE_SCRIPTS
# ("name=module:func;...")

def _project_wheel(wheel_directory: str) -> str:
    module = os.environ["FAKE_MODULE"]
    scripts = dict(s.split("=", 1) for s in os.environ.get("FAKE_SCRIPTS", "").split(";") if s)
    path = make_wheel(Path(wheel_directory), os.environ["FAKE_NAME"], os.environ["FAKE_VERSION"],
                      files={module: Path(module).read_text()}, scripts=scripts)
    return path.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: ARG001
    return _project_wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: ARG001
    return _project_wheel(wheel_directory)


if __name__ == "__main__":  # python dists.py venv DIR  (the fake `python3 -m venv DIR`)
    make_venv(Path(sys.argv[2]).resolve())
