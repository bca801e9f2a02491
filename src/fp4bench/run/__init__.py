"""Running cases: ``sweep`` (which cases) -> ``case`` (check and time one) -> ``windows`` (more
independent windows of it) and ``worker`` (the same in a child process); ``linelog`` (each
finished case on disk as it finishes)."""
