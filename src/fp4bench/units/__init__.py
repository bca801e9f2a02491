"""``fp4bench units``: the unit-health check of a host, every GPU against its siblings.

Layers: ``run`` (one worker per GPU, pinned by UUID; the same benchmarks measured on every GPU at
once, window by window) -> ``estimate`` (a unit's windows against its siblings' through
``gate.rule``) -> ``judge`` (verdicts per benchmark and unit, the unit table, the report and JSON).
"""
