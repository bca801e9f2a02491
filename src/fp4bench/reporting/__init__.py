"""Reports of saved runs: machine-readable verdicts (JSON, markdown, CSV) and a markdown report
with PNG plots (``fp4bench report``). Reads the same pytest-benchmark JSON files the gate reads;
nothing here measures or judges anything itself."""
