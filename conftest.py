"""Root conftest: activates the fp4bench pytest plugin for `pytest bench` and `pytest tests`.

The plugin is lazy: a session that collects no fp4bench case never touches CUDA or baselines.
"""

pytest_plugins = ("fp4bench.plugin",)
