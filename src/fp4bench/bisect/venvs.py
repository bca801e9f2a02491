"""One venv per tested release, cached: the release installed over the base environment, the rest
of the stack as pinned, then imported and prepared as the upgrade gate prepares its sides.

The base environment is the runner's (``--python``, default the interpreter running fp4bench).
Its packages are shared, not installed again (torch alone is gigabytes): the new venv's
``site-packages`` holds a ``.pth`` that adds the base's ``site-packages`` after its own (what
``python -m venv --system-site-packages`` does for a system interpreter, here for a base that is
itself a venv), so the release installed into the venv shadows the base's copy and pip leaves the
base alone (it never uninstalls outside the venv). Into it pip installs ``package==version`` with
the stack's pins (``name==version`` lines of a stack file, which pip finds satisfied by the base
where the base has them), from a local wheel folder (``--no-index --find-links``) or the index.
Then ``python -c "import <module>"`` must report the release's version, and ``python -m fp4bench
prepare`` builds the release's FlashInfer JIT modules before anything is timed (the
``fp4bench prepare`` step of .github/workflows/upgrade-gate.yml). A failure at any of these makes
the release ``ReleaseBroken``, with the step and pip's or Python's last lines.

A venv is reused when its folder (named by the package, version and a hash of the pins, the base
and the source) has the ``READY`` marker that the last step writes; a half-built one is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from fp4bench.bisect.search import ReleaseBroken
from fp4bench.outputs import write_atomic

READY = ".fp4bench-ready"
#: the module a distribution is imported as, where it is not the name with '_' for '-'
MODULES = {"flashinfer-python": "flashinfer", "sgl-kernel": "sgl_kernel", "apache-tvm-ffi": "tvm_ffi",
           "nvidia-cutlass-dsl": "cutlass"}
_SITE = ("import json, sysconfig; p = sysconfig.get_paths(); "
         "print(json.dumps({'site': sorted({p['purelib'], p['platlib']}), "
         "'python': '%d.%d' % __import__('sys').version_info[:2]}))")


def module_of(package: str) -> str:
    name = canonicalize_name(package)
    return MODULES.get(name, name.replace("-", "_"))


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:] if ln.strip()) or "(no output)"


def _run(cmd: list[str], what: str, timeout: float) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ReleaseBroken(f"{what}: no result within {timeout:g} s") from None
    except OSError as exc:
        raise ReleaseBroken(f"{what}: {exc}") from None
    if proc.returncode != 0:
        raise ReleaseBroken(f"{what} failed (exit {proc.returncode}): {_tail(proc.stderr or proc.stdout)}")
    return proc.stdout


@dataclass
class VenvBuilder:
    """``builder(version)``: the venv folder of that release of ``package`` (``ReleaseBroken`` when
    it cannot be built). ``pins``: the rest of the stack (the package's own pin is dropped);
    ``wheels``: a local folder to install from instead of the index; ``pip_args``: more pip
    options (e.g. ``--extra-index-url``); ``prepare``: run ``fp4bench prepare`` in the venv."""

    cache: Path
    package: str
    base_python: str = sys.executable
    pins: dict[str, str] = field(default_factory=dict)
    wheels: str | None = None
    pip_args: str = ""
    prepare: bool = True
    module: str | None = None
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        self.cache = Path(self.cache)
        own = canonicalize_name(self.package)
        self.pins = {canonicalize_name(n): v for n, v in self.pins.items() if canonicalize_name(n) != own}
        self.module = self.module or module_of(self.package)
        self._base: dict | None = None

    def base(self) -> dict:
        """The base interpreter's site folders and Python version."""
        if self._base is None:
            try:
                self._base = json.loads(_run([self.base_python, "-c", _SITE], f"--python {self.base_python}", 120))
            except ReleaseBroken as exc:
                raise ValueError(str(exc)) from None
        return self._base

    def folder(self, version: str) -> Path:
        key = json.dumps([self.pins, self.base(), self.wheels, self.pip_args, self.prepare, self.module], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        return self.cache / f"{canonicalize_name(self.package)}-{version}-{digest}"

    def __call__(self, version: str) -> Path:
        where = self.folder(version)
        if (where / READY).is_file():
            return where
        if where.exists():
            shutil.rmtree(where)  # half-built by an interrupted run
        where.parent.mkdir(parents=True, exist_ok=True)
        base = self.base()
        _run([self.base_python, "-m", "venv", "--without-pip", str(where)], f"{version}: python -m venv", 300)
        python = where / "bin" / "python"
        site = where / "lib" / f"python{base['python']}" / "site-packages"
        lines = "".join(f"import site; site.addsitedir({s!r})\n" for s in base["site"])
        write_atomic(site / "_fp4bench_base.pth", lines)
        source = ["--no-index", "--find-links", str(self.wheels)] if self.wheels else []
        reqs = [f"{self.package}=={version}", *(f"{n}=={v}" for n, v in sorted(self.pins.items()))]
        _run([self.base_python, "-m", "pip", "--python", str(python), "install", "--no-input", "--quiet",
              "--disable-pip-version-check", *source, *shlex.split(self.pip_args), *reqs],
             f"{self.package} {version}: pip install", self.timeout_s)
        got = _run([str(python), "-c", f"import importlib.metadata as m, {self.module}; "
                    f"print(m.version({self.package!r}))"], f"{self.package} {version}: import {self.module}", 600)
        try:
            same = Version(got.strip()) == Version(version)
        except InvalidVersion:
            same = False
        if not same:
            raise ReleaseBroken(f"{self.package} {version}: the venv imports version {got.strip()!r}")
        if self.prepare:
            _run([str(python), "-m", "fp4bench", "prepare"], f"{self.package} {version}: fp4bench prepare",
                 self.timeout_s)
        write_atomic(where / READY, json.dumps({"package": self.package, "version": version, "pins": self.pins}) + "\n")
        return where
