"""``fp4bench ab``: the same sweep in two Python environments on one GPU, interleaved.

Layers: ``schedule`` (the A,B,B,A order) -> ``run`` (two workers: list, check, time in rounds)
-> ``judge`` (the paired samples through the existing gate, the report and its JSON).
"""
