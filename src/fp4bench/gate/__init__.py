"""The regression gate: result and baseline files, where they live, and the verdict.

``baseline`` reads pytest-benchmark JSON files carrying an ``"fp4bench"`` section and slim
baseline files, and writes the slim format; ``store`` keeps one approved baseline per GPU model
(and per unit) and approves candidates; ``rule`` is the decision rule on independent replicates;
``verdict`` decides PASS / FAIL / AMBIGUOUS / NEW / MISSING / INVALID per benchmark; ``coverage``
counts what was judged against what was expected, and holds the gate's exit codes.

Nothing is imported here: ``fp4bench.gate.coverage`` (exit codes) must stay importable without
numpy/scipy, so command-line help never pays for them.
"""
