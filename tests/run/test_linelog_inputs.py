"""Bad line logs and result files are clean errors naming the file: a ``sweep`` list in a line-log
header, a 5001-digit integer (Python refuses to convert it), and a log whose every case failed is
said to have failed, not to be "renamed or removed"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fakes.benchjson import H200, bench_entry, bench_json, write
from fp4bench.cli import main

NAMES = [f"b.py::t[{i}]" for i in range(3)]


def _base(tmp_path: Path) -> str:
    rng = np.random.default_rng(0)
    return str(write(tmp_path / "base.json", bench_json([bench_entry(n, list(rng.normal(1e-5, 1e-7, 10)))
                                                          for n in NAMES])))


def _log(tmp_path: Path, header: dict, *records: dict) -> str:
    head = {"type": "header", "kind": "fp4bench-line-log", "fingerprint": H200.to_dict(), "sweep": {},
            "planned": NAMES, **header}
    p = tmp_path / "run.lines.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in (head, *records)) + "\n")
    return str(p)


def test_a_sweep_list_in_the_header_is_named(tmp_path, capsys):
    assert main(["compare", _base(tmp_path), _log(tmp_path, {"sweep": ["glm-5"]})]) == 2
    err = capsys.readouterr().err
    assert "run.lines.jsonl: line 1 (the header): 'sweep' must be an object, got ['glm-5']" in err


def test_a_number_of_5001_digits_is_named_with_its_file(tmp_path, capsys):
    base = _base(tmp_path)
    big = tmp_path / "big.json"
    big.write_text(Path(base).read_text().replace('"data": [', '"data": [' + "9" * 5001 + ", ", 1))
    assert main(["compare", str(big), base]) == 2
    assert f"baseline file {big}: a number with too many digits" in capsys.readouterr().err
    log = _log(tmp_path, {}, {"type": "case", "fullname": NAMES[0], "outcome": "passed", "samples": [1.0]})
    Path(log).write_text(Path(log).read_text().replace('"samples": [1.0]', '"samples": [' + "9" * 5001 + "]"))
    assert main(["compare", base, log]) == 2
    assert "run.lines.jsonl: line 2: a number with too many digits" in capsys.readouterr().err


def test_a_log_whose_every_case_failed_says_so(tmp_path, capsys):
    cases = [{"type": "case", "fullname": n, "outcome": "failed", "samples": [], "extra_info": {}, "availability": {}}
             for n in NAMES]
    assert main(["compare", _base(tmp_path), _log(tmp_path, {}, *cases, {"type": "end"})]) == 3
    out = capsys.readouterr().out
    assert "3 logged cases FAILED in the run (no timing): b.py::t[0], b.py::t[1], b.py::t[2]" in out
