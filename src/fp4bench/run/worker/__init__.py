"""Cases run in child processes: a crash, a poisoned CUDA context or a hang costs one case.

Layers: ``protocol`` (JSON-line messages, problem codec) <- ``child`` (the process that runs
cases with a ``CaseRunner`` built by ``run.factory``) and ``pool`` (the parent side: start, watch, restart).
Start a child with ``python -m fp4bench.run.worker``; any interpreter whose environment has
fp4bench's dependencies works (the parent puts its own fp4bench source first on PYTHONPATH).
"""
