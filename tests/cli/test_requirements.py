"""Stack files read strictly (``cli.requirements``) and written only by ``stack freeze`` through the
one write path: double pins are an error, pip's file options are handled or refused by name, valid
pip lines (``===``, ``--hash``, markers, continuations) are not differences, ``--runner`` is a name
and a failed write leaves the old stack file whole."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

from fp4bench.cli import stack
from fp4bench.cli.requirements import Exact, read_pins, same_version

PY = "3.11.7"
VENV = {"torch": "2.9.1+cu128", "numpy": "2.1.0", "flashinfer-python": "0.7.2.post1", "pip": "24.0"}


def _file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.txt"
    p.write_text(text)
    return p


def test_valid_pip_lines_are_read_as_pip_reads_them(tmp_path):
    p = _file(tmp_path, "# header\n--extra-index-url https://download.pytorch.org/whl/cu128\n"
                        "torch==2.9.1+cu128 \\\n    --hash=sha256:aaaa --hash=sha256:bbbb\n"
                        "Flashinfer_Python===0.7.2.post1  # pinned exactly\n"
                        "numpy==2.1.0 ; python_version >= '3.10'\n"
                        "numpy==1.26.4 ; python_version < '3.10'\n")
    pins = read_pins(p, PY)
    assert pins == {"torch": "2.9.1+cu128", "flashinfer-python": "0.7.2.post1", "numpy": "2.1.0"}
    assert isinstance(pins["flashinfer-python"], Exact)
    assert stack.differences(pins, VENV) == []


@pytest.mark.parametrize(("text", "message"), [
    ("torch==2.9.1\nTorch==2.9.1\n", "r.txt:2: torch is pinned twice (also line 1)"),
    ("-r other.txt\n", "r.txt:1: -r includes another file"),
    ("--constraint c.txt\n", "r.txt:1: --constraint includes another file"),
    ("-e .\n", "r.txt:1: -e: an editable install pins no version"),
    ("--require-hashes\n", "r.txt:1: option --require-hashes is not one a stack file takes"),
    ("torch>=2.9\n", "r.txt:1: 'torch>=2.9' does not pin one exact version"),
    ("torch==2.*\n", "does not pin one exact version"),
    ("torch==2.9.1,!=2.9.0\n", "does not pin one exact version"),
    ("torch @ https://x/torch.whl\n", "a URL pins no version"),
    ("torch==2.9.1 --global-option=x\n", "option --global-option after a requirement"),
    ("torch 2.9.1\n", "r.txt:1: not a requirement"),
])
def test_a_line_that_is_not_an_exact_pin_is_refused_naming_file_and_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
                       .replace("*", r"\*").replace("'", "'")):
        read_pins(_file(tmp_path, text), PY)


def test_versions_compare_as_pep_440_with_the_local_part():
    assert same_version("2.0", "2.0.0") and not same_version("2.9.1", "2.9.1+cu128")
    assert not same_version(Exact("2.0"), "2.0.0") and same_version(Exact("2.0"), "2.0")


@pytest.fixture
def venv(monkeypatch):
    monkeypatch.setattr(stack, "installed", lambda python: (PY, dict(VENV)))


def test_check_refuses_a_double_pin_instead_of_passing(tmp_path, venv, capsys):
    p = _file(tmp_path, stack.render("r1", PY, VENV) + "torch==2.9.1+cu128\n")
    assert stack.stack_main(["freeze", "--file", str(p), "--check"]) == 2
    assert "torch is pinned twice" in capsys.readouterr().err


@pytest.mark.parametrize("runner", ["../evil", "/abs/path", "a\nb", "..", "a/b", ""])
def test_runner_is_a_name_never_a_path(tmp_path, venv, capsys, runner):
    rc = stack.stack_main(["freeze", "--runner", runner, "--stack-dir", str(tmp_path / "stack")])
    err = capsys.readouterr().err
    assert rc == 2 and ("a runner name is" in err or "give --runner" in err)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_freeze_writes_only_a_stack_file(tmp_path, venv, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    assert stack.stack_main(["freeze", "--file", str(other)]) == 2
    assert "is not a stack file" in capsys.readouterr().err and other.read_text() == "my notes\n"
    target = tmp_path / "stack" / "real.txt"
    target.parent.mkdir()
    target.write_text(stack.render("real", PY, {"torch": "2.8.0"}))
    link = tmp_path / "stack" / "r1.txt"
    link.symlink_to(other)  # a symlink to a file that is not a stack file
    assert stack.stack_main(["freeze", "--runner", "r1", "--stack-dir", str(tmp_path / "stack")]) == 2
    capsys.readouterr()
    assert other.read_text() == "my notes\n"
    assert stack.stack_main(["freeze", "--runner", "real", "--stack-dir", str(tmp_path / "stack")]) == 0
    assert read_pins(target, PY)["torch"] == "2.9.1+cu128"
    capsys.readouterr()
    assert stack.stack_main(["freeze", "--runner", "r2", "--file", "-"]) == 0
    assert capsys.readouterr().out.startswith("# fp4bench stack of runner r2")


def test_a_failed_write_leaves_the_old_stack_file_whole(tmp_path, venv, capsys):
    """Before: a bare write_text left an empty or truncated stack file behind a traceback."""
    target = tmp_path / "stack" / "r1.txt"
    target.parent.mkdir()
    old = stack.render("r1", PY, {"torch": "2.8.0"})
    target.write_text(old)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
    try:
        rc = stack.stack_main(["freeze", "--runner", "r1", "--stack-dir", str(target.parent)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err
    assert rc == 4 and f"cannot write {target}: File too large" in err and "Traceback" not in err
    assert target.read_text() == old and [p.name for p in target.parent.iterdir()] == ["r1.txt"]
    assert sys.executable  # the venv listing was not what failed


def test_freeze_imports_no_torch_numpy_or_scipy(tmp_path):
    """``stack freeze --python VENV`` needs the interpreter's path, not the worker pool's imports
    (torch, numpy and scipy: seconds a call); a fresh interpreter, the venv's listing faked."""
    import json
    import subprocess

    code = ("import json, sys\nfrom fp4bench.cli import stack\n"
            f"stack.installed = lambda python: ({PY!r}, {VENV!r})\n"
            f"rc = stack.stack_main(['freeze', '--python', sys.executable, '--file', {str(tmp_path / 's.txt')!r}])\n"
            "print(json.dumps([rc, [m for m in ('torch', 'numpy', 'scipy') if m in sys.modules]]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(Path(stack.__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == [0, []]
    assert read_pins(tmp_path / "s.txt", PY)["torch"] == "2.9.1+cu128"
