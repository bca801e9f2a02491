"""The built-in adapters: one module per library path, each defining ``BACKENDS``; modules whose
name starts with ``_`` are shared helpers of the adapters."""
