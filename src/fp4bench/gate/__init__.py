"""The regression gate: result files, the verdict on a run against its baseline, and its outputs.

Files: ``record`` (one benchmark's samples and ``extra_info``), ``baseline`` (reading result and
baseline files), ``slim`` (the approved baseline's format), ``compatibility`` (what may be compared
with what), ``store`` (where files live; approving a run), ``choice`` (which file judges each
benchmark), ``unit`` (the GPU-unit policy). Judging: ``rule`` (the decision rule on independent
replicates), ``policy`` (the gate's settings), ``assess`` (one benchmark's statistics), ``judge``
and ``tactics`` (one benchmark's verdict, ``verdict``), ``compare`` (a whole run: ``CompareResult``),
``coverage`` (what was judged of what was expected; the exit codes), ``verdict_json`` (the verdict
JSON document of the gate and of ``fp4bench ab``), ``power`` (detection power on recorded runs).

This package face imports nothing: ``fp4bench.gate.coverage`` (exit codes) stays importable
without numpy, and no module of the package imports scipy before it computes a decision.
"""
