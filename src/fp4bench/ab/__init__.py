"""``fp4bench ab``: the same sweep in two Python environments on one GPU, interleaved.

Layers: ``defaults`` / ``config`` (what a run is asked to do) -> ``schedule`` (the A,B,B,A order)
-> ``estimate`` (one benchmark's paired estimate) -> ``records`` (what a run produced) -> ``run``
(the worker processes: list, check, time in rounds) -> ``multi`` (one run per GPU) -> ``merge``
(their runs as one) -> ``judge`` (the verdict, the report and its JSON).
"""
