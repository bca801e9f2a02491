"""Root conftest: activates the fp4bench pytest plugin for an uninstalled checkout.

An installed fp4bench registers the plugin through its ``pytest11`` entry point under the name
"fp4bench.plugin"; pytest then skips this ``pytest_plugins`` entry (same name), so it loads once.
The plugin is lazy: a session that collects no fp4bench case never touches CUDA or baselines.
"""

pytest_plugins = ("fp4bench.plugin",)
