"""``fp4bench fidelity``: block splitting, row verdicts and the command line without a GPU."""

from __future__ import annotations

import json

import pytest
import torch

from fp4bench.cli.fidelity import fidelity_main
from fp4bench.measure.fidelity import FidelityRow, format_row, run, split_interleaved


def _row(graph=10e-6, eager=10e-6, same=True):
    return FidelityRow(op="bf16 torch.mm", m=64, n=4096, k=6144, timer_s=10e-6, timer_method="cupti",
                       calls_per_sample=4, graph_s=graph, eager_s=eager, sm_clock_mhz=1980.0,
                       same_kernels=same, graph_kernels=("k",), eager_kernels=("k",) if same else ("k2",))


def test_split_interleaved_separates_graph_and_eager_blocks():
    g = torch.Generator().manual_seed(0)
    n, pairs = 3, 7
    graph = (10e-6 * (1 + 0.01 * torch.randn(pairs, n, generator=g))).tolist()
    eager = (12e-6 * (1 + 0.01 * torch.randn(pairs, n, generator=g))).tolist()
    per_call = [t for p in range(pairs) for t in graph[p] + eager[p]]
    gs, es = split_interleaved(per_call, n)
    assert gs == pytest.approx(sorted(sum(b) / n for b in graph)[pairs // 2])
    assert es == pytest.approx(sorted(sum(b) / n for b in eager)[pairs // 2])


@pytest.mark.parametrize("count,n", [(0, 2), (10, 3), (12, 0)])
def test_split_interleaved_refuses_ragged_input(count, n):
    with pytest.raises(ValueError, match="do not split"):
        split_interleaved([1e-6] * count, n)


def test_row_verdict():
    assert _row(10.1e-6, 10e-6).ok(0.02)
    assert not _row(10.3e-6, 10e-6).ok(0.02)
    assert not _row(same=False).ok(0.02)
    assert not _row(graph=None).ok(0.02) and _row(graph=None).delta is None
    assert "KERNELS DIFFER" in format_row(_row(same=False), 0.02)
    assert "+3.00%" in format_row(_row(10.3e-6, 10e-6), 0.02)
    assert json.dumps(_row().to_dict())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA behaviour")
def test_without_cuda_it_says_so(capsys):
    assert fidelity_main([]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        run([1], 8, 8, 0.1, torch.device("cpu"))


@pytest.mark.parametrize("args", [["--ms", "1,x"], ["--ms", "0"], ["--budget", "0"], ["--tolerance", "-1"]])
def test_bad_arguments(capsys, args):
    assert fidelity_main(args) == 2
    assert args[0] in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fidelity_on_the_gpu(tmp_path):
    assert fidelity_main(["--ms", "64", "--budget", "0.2", "--rows-json", str(tmp_path / "f.json")]) == 0
    rows = json.loads((tmp_path / "f.json").read_text())["rows"]
    assert len(rows) == 2 and all(r["same_kernels"] for r in rows)
