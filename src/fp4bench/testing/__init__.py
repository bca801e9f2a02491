"""Test-only helpers (fault-injection backends). Never registered unless asked for with
``--fp4-plugin fp4bench.testing.faults``."""
