"""The releases of a package between a good and a bad version, in ``packaging.version`` order.

Two sources: a local folder of distribution files (wheel names read with
``packaging.utils.parse_wheel_filename``, sdists with ``parse_sdist_filename``) or an index's JSON
API (PyPI's ``<index>/<package>/json``: ``releases`` maps each version to its files, a file says
whether it is ``yanked``; ``<index>/<package>/<version>/json`` gives a release's
``info.release_url``, its page). A release whose every file is yanked is not a release to test;
pre- and dev-releases are left out unless the good or the bad end is one.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)
from packaging.version import InvalidVersion, Version

#: PyPI's JSON API (``https://pypi.org/pypi/<project>/json``)
PYPI_JSON = "https://pypi.org/pypi"


class ReleaseListError(ValueError):
    """The releases could not be listed, or the good and bad versions are not a range of them."""


def version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ReleaseListError(f"{what}: {text!r} is not a version (PEP 440)") from None


def from_folder(folder: str | os.PathLike[str], package: str) -> list[Version]:
    """The versions of ``package`` that ``folder`` holds a wheel or sdist of, sorted."""
    where = Path(folder)
    if not where.is_dir():
        raise ReleaseListError(f"--wheels {where}: no such folder")
    want = canonicalize_name(package)
    found: set[Version] = set()
    for f in where.iterdir():
        try:
            if f.name.endswith(".whl"):
                name, v, _, _ = parse_wheel_filename(f.name)
            elif f.name.endswith((".tar.gz", ".zip")):
                name, v = parse_sdist_filename(f.name)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if name == want:
            found.add(v)
    if not found:
        raise ReleaseListError(f"--wheels {where}: holds no wheel or sdist of {package}")
    return sorted(found)


def _get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 - the index the user named
            return json.loads(r.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ReleaseListError(f"{url}: cannot read the index's JSON ({exc})") from None


def from_index(index: str, package: str) -> list[Version]:
    """The versions of ``package`` the index's JSON API lists with at least one file not yanked."""
    doc = _get_json(f"{index.rstrip('/')}/{canonicalize_name(package)}/json")
    releases = doc.get("releases")
    if not isinstance(releases, dict):
        raise ReleaseListError(f"{index}: the JSON of {package} has no 'releases' object")
    found = []
    for text, files in releases.items():
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if files and any(not f.get("yanked", False) for f in files):
            found.append(v)
    if not found:
        raise ReleaseListError(f"{index}: lists no release of {package}")
    return sorted(found)


def release_page(index: str, package: str, v: Version | str) -> str | None:
    """The release's page as the index gives it (``info.release_url``), None when it gives none."""
    try:
        doc = _get_json(f"{index.rstrip('/')}/{canonicalize_name(package)}/{v}/json")
    except ReleaseListError:
        return None
    url = (doc.get("info") or {}).get("release_url")
    return str(url) if url else None


def between(versions: list[Version], good: Version, bad: Version) -> list[Version]:
    """``good``, every listed version after it and before ``bad``, and ``bad``: the range to bisect.
    Pre- and dev-releases inside are left out unless an end is one."""
    if not good < bad:
        raise ReleaseListError(f"the good version {good} must be older than the bad version {bad}")
    missing = [str(v) for v in (good, bad) if v not in versions]
    if missing:
        raise ReleaseListError(f"version{'s' if len(missing) > 1 else ''} {', '.join(missing)} not listed; "
                               f"listed: {', '.join(map(str, versions))}")
    pre = good.is_prerelease or bad.is_prerelease
    inside = [v for v in versions if good < v < bad and (pre or not v.is_prerelease)]
    return [good, *inside, bad]


@dataclass(frozen=True)
class Source:
    """Where the releases come from: a local folder (``wheels``) or an index's JSON API (``index``)."""

    index: str = PYPI_JSON
    wheels: str | None = None

    def versions(self, package: str) -> list[Version]:
        return from_folder(self.wheels, package) if self.wheels else from_index(self.index, package)

    def page(self, package: str, v: Version | str) -> str | None:
        return None if self.wheels else release_page(self.index, package, v)
