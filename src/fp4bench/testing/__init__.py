"""Test-only backends that prove the checks and the gate: ``faults`` (imitated upstream bugs) and
``slowdown`` (registered backends slowed in place). Never registered unless asked for with
``--fp4-plugin fp4bench.testing.faults`` / ``fp4bench.testing.slowdown``; a run that measures one
is recorded as such and never becomes a baseline."""
