"""``fp4bench bisect``: which release of a package made the failing benchmarks slower.

``releases`` lists the releases between a good and a bad version (an index's JSON API or a local
wheel folder), ``venvs`` builds one cached venv per release (the rest of the stack as pinned, the
base environment's packages shared), ``step`` measures a pair of releases with ``fp4bench ab``,
``search`` bisects over them, ``state`` keeps what was measured so a rerun resumes, ``table``
prints it.
"""
