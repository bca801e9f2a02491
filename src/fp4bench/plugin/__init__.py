"""The pytest plugin (registered as ``fp4bench.plugin``): its hooks and fixtures live in ``hooks``.

What the plugin delegates to: ``session`` (one run's state, and a method per job of ``settings``,
``baselines``, ``cases`` and ``finish``), ``console`` (what a run prints), ``runlog`` /
``outputs`` / ``compat`` (files and pytest-benchmark conventions), ``benchmark`` (every use of
pytest-benchmark's internal objects), ``xdist`` (``-n`` over the GPUs), ``merge`` (a worker's
finished case into the controller's session) and ``ab`` (``--fp4-ab-against``).
"""

from fp4bench.plugin.hooks import (  # noqa: F401  pytest finds hooks and fixtures by name on this module
    pytest_addoption,
    pytest_configure,
    pytest_sessionstart,
    pytest_benchmark_compare_machine_info,
    pytest_xdist_auto_num_workers,
    pytest_generate_tests,
    pytest_collection_modifyitems,
    pytest_deselected,
    pytest_runtestloop,
    pytest_runtest_makereport,
    pytest_keyboard_interrupt,
    fp4_session,
    fp4_bench,
    pytest_benchmark_update_json,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
