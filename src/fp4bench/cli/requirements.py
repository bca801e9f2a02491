"""A stack file read as pip reads a requirements file, strictly: ``read_pins(path)``.

Each requirement is parsed with ``packaging`` (PEP 508: names, extras, specifiers, environment
markers); pip's own file syntax is handled explicitly (pip, ``req/req_file.py``):

* comments (``#`` at the start or after whitespace) and blank lines are skipped; a line ending in
  ``\\`` continues on the next;
* index options (``--extra-index-url``, ``--index-url``/``-i``, ``--find-links``/``-f``,
  ``--trusted-host``, ``--no-index``, ``--pre``, ``--prefer-binary``) say where wheels come from,
  not which versions: accepted and not compared;
* ``--hash`` after a requirement checks the wheel, not the version: accepted and not compared;
* ``-r``/``--requirement``, ``-c``/``--constraint``, ``-e``/``--editable`` and any other option
  are refused: a stack file pins every package itself, by name;
* a requirement must pin one exact version (``==V`` without a wildcard, or ``===V``, compared as
  the exact string); a URL, a range or two specifiers are refused; an environment marker is
  evaluated for the interpreter checked (a line for another Python is not its pin);
* a package pinned twice (by any spelling of its name) is an error naming both lines.

Every error names the file and line (``ValueError``: the command's usage error).
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

#: options that say where wheels come from (with a value, or a bare flag)
INDEX_OPTIONS = {"--extra-index-url": True, "--index-url": True, "-i": True, "--find-links": True, "-f": True,
                 "--trusted-host": True, "--no-index": False, "--pre": False, "--prefer-binary": False,
                 "--only-binary": True, "--no-binary": True}
_COMMENT = re.compile(r"(^|\s+)#.*$")


class Exact(str):
    """A version pinned with ``===``: equal only to the very same string."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: continuations joined, comments removed."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw)
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


def _option_line(where: str, line: str) -> None:
    """An option line: an index option is fine; anything else is refused."""
    flag = line.split("=", 1)[0].split()[0]
    if flag in INDEX_OPTIONS:
        return
    if flag in ("-r", "--requirement", "-c", "--constraint"):
        raise ValueError(f"{where}: {flag} includes another file; a stack file pins every package itself")
    if flag in ("-e", "--editable"):
        raise ValueError(f"{where}: {flag}: an editable install pins no version; a stack file records fp4bench in "
                         "its header and pins the rest")
    raise ValueError(f"{where}: option {flag} is not one a stack file takes (index options and --hash only)")


def _pin(where: str, text: str, python: str | None) -> tuple[str, str] | None:
    """(canonical name, version) of one requirement; None when its marker excludes ``python``."""
    requirement, _, options = text.partition(" --")
    for opt in re.findall(r"(?:^|\s)(--[^\s=]+)", "--" + options if options else ""):
        if opt != "--hash":
            raise ValueError(f"{where}: option {opt} after a requirement; only --hash is taken there")
    try:
        req = Requirement(requirement.strip())
    except InvalidRequirement as exc:
        raise ValueError(f"{where}: not a requirement: {exc}") from None
    if req.url:
        raise ValueError(f"{where}: {req.name} @ {req.url}: a URL pins no version; pin name==version")
    if req.marker is not None:
        env = dict(default_environment())
        if python:
            env.update(python_full_version=python, python_version=".".join(python.split(".")[:2]))
        if not req.marker.evaluate(env):
            return None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or specs[0].version.endswith(".*"):
        raise ValueError(f"{where}: {text!r} does not pin one exact version (name==version)")
    spec = specs[0]
    if spec.operator == "===":
        return canonicalize_name(req.name), Exact(spec.version)
    return canonicalize_name(req.name), spec.version


def read_pins(path: str | Path, python: str | None = None) -> dict[str, str]:
    """{canonical name: version} of a stack file (``Exact`` for a ``===`` pin); ``python``: the
    version of the interpreter the markers are evaluated for (default: this one)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    pins: dict[str, str] = {}
    lines: dict[str, int] = {}
    for no, line in _logical_lines(text):
        where = f"{p}:{no}"
        if line.startswith("-"):
            _option_line(where, line)
            continue
        pin = _pin(where, line, python)
        if pin is None:
            continue
        name, version = pin
        if name in pins:
            raise ValueError(f"{where}: {name} is pinned twice (also line {lines[name]}); one pin per package")
        pins[name], lines[name] = version, no
    return pins


def same_version(pin: str, have: str) -> bool:
    """The installed version ``have`` is the pinned one: ``===`` the exact string; ``==`` equal as
    PEP 440 versions, the local part included (``2.9.1+cu128`` is not ``2.9.1``)."""
    if isinstance(pin, Exact):
        return pin == have
    try:
        return Version(pin) == Version(have) and Version(pin).local == Version(have).local
    except InvalidVersion:
        return pin == have
