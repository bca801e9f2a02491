"""The adapters' operand access (backends/builtin/_marshal.py): one format check for NVFP4 and MXFP4."""

from __future__ import annotations

import pytest

from fp4bench import formats
from fp4bench.backends.builtin._marshal import fp4_pair
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem


@pytest.mark.parametrize(("fmt", "cls"), [("nvfp4", formats.NVFP4), ("mxfp4", formats.MXFP4)])
def test_a_pair_of_the_asked_format_is_returned(fmt, cls):
    ops = make_operands(GemmProblem(4, 64, 64), fmt, fmt)
    qa, qw = fp4_pair(ops, cls, "some-backend")
    assert (qa, qw) == (ops.qa, ops.qw) and isinstance(qa, cls) and isinstance(qw, cls)


@pytest.mark.parametrize(("fmt", "cls", "want"), [("nvfp4", formats.MXFP4, "MXFP4"), ("mxfp4", formats.NVFP4, "NVFP4")])
def test_another_format_is_a_type_error_naming_backend_and_formats(fmt, cls, want):
    ops = make_operands(GemmProblem(4, 64, 64), fmt, fmt)
    with pytest.raises(TypeError, match=f"some-backend: needs {want} activations and weights, got "
                                        f"{fmt.upper()} and {fmt.upper()} \\(formats {fmt}/{fmt}\\)"):
        fp4_pair(ops, cls, "some-backend")
