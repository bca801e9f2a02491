"""Listing the releases between a good and a bad version: a local wheel folder, an index's JSON API."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from fakes.bisect_releases import PACKAGE, VERSIONS, call_s, wheel_folder
from fp4bench.bisect.releases import ReleaseListError, Source, between, from_folder, from_index, release_page


def test_a_wheel_folder_lists_the_package_in_version_order(tmp_path):
    wheel_folder(tmp_path, call_s())
    found = from_folder(tmp_path, "Flashinfer_Python")  # any spelling of the name
    assert found == sorted(Version(v) for v in (*VERSIONS, "0.7.3rc1"))
    # post-releases sort after their release; the pre-release is left out of a range of final releases
    assert [str(v) for v in between(found, Version("0.6.18.post1"), Version("0.7.4"))] == list(VERSIONS)
    assert "0.7.3rc1" in [str(v) for v in between(found, Version("0.7.2"), Version("0.7.3rc1"))]


def test_bad_ranges_are_refused_naming_what_is_wrong(tmp_path):
    found = from_folder(wheel_folder(tmp_path, call_s()), PACKAGE)
    with pytest.raises(ReleaseListError, match="must be older than the bad version"):
        between(found, Version("0.7.4"), Version("0.7.0"))
    with pytest.raises(ReleaseListError, match="version 0.7.3 not listed; listed: 0.6.18.post1, 0.7.0"):
        between(found, Version("0.7.0"), Version("0.7.3"))
    with pytest.raises(ReleaseListError, match="holds no wheel or sdist of torch"):
        from_folder(tmp_path, "torch")
    with pytest.raises(ReleaseListError, match="no such folder"):
        from_folder(tmp_path / "nope", PACKAGE)


def _index(tmp_path, releases: dict) -> str:
    (tmp_path / PACKAGE).mkdir(parents=True)
    (tmp_path / PACKAGE / "json").write_text(json.dumps({"info": {}, "releases": releases}))
    (tmp_path / PACKAGE / "0.7.1").mkdir()
    (tmp_path / PACKAGE / "0.7.1" / "json").write_text(json.dumps(
        {"info": {"release_url": "https://pypi.org/project/flashinfer-python/0.7.1/"}}))
    return tmp_path.as_uri()


def test_the_index_json_api_lists_releases_without_the_yanked_and_gives_the_release_page(tmp_path):
    ok = [{"filename": "x.whl", "yanked": False}]
    index = _index(tmp_path, {"0.7.0": ok, "0.7.1": ok, "0.7.0.post1": ok, "0.6.18.post1": ok, "0.7.2": ok,
                              "0.7.1.post1": [{"filename": "y.whl", "yanked": True}], "0.7.3": [], "junk": ok})
    assert [str(v) for v in from_index(index, PACKAGE)] == ["0.6.18.post1", "0.7.0", "0.7.0.post1", "0.7.1", "0.7.2"]
    assert release_page(index, PACKAGE, "0.7.1") == "https://pypi.org/project/flashinfer-python/0.7.1/"
    assert release_page(index, PACKAGE, "0.7.2") is None  # the index has no page for it
    assert Source(wheels=str(tmp_path)).page(PACKAGE, "0.7.1") is None  # a wheel folder has no pages
    with pytest.raises(ReleaseListError, match="cannot read the index's JSON"):
        from_index(index, "no-such-package")
