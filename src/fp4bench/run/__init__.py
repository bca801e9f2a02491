"""Running cases: ``sweep`` (which cases) -> ``case`` (check and time one) -> ``windows`` (more
independent windows of it) and ``worker`` (the same in a child process); ``settings`` and
``factory`` (what a ``CaseRunner`` is built from, and the one place it is built, in this process
or a worker); ``linelog`` (each finished case on disk as it finishes)."""
