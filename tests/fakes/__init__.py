"""CPU fakes of the FP4 GEMM libraries, for the backend contract tests.

Each fake implements the *documented* semantics of one library entry point
: it checks the argument dtypes, shapes, strides
and devices that the real library checks (raising ``FakeContractError``), decodes the arguments
in the layout the library expects, written here independently of ``fp4bench.formats`` (the
128x4 offset formula, a nibble LUT), and writes the fp32 product rounded to the output dtype.

Every fake counts its calls (``calls``) so gating tests can prove that no library function ran,
and takes ``misread`` options that reproduce plausible decoding bugs, so the contract tests are
shown to be able to fail.

Beside them: ``inproc_worker`` (in-process fake worker processes on a simulated clock, for
``fp4bench ab``, ``fp4bench units`` and ``--fp4-isolate``: the ``sim_workers`` fixture of
tests/conftest.py), ``ab_env`` and ``pytest_run`` (backends with a fixed call time on the clock
in use), ``fake_worker`` (a torch-free subprocess stub of the worker, for the real pipe transport),
``gpu_memory`` (a simulated GPU's device memory for the in-process workers: out of memory as CUDA
raises it), ``ab_noise`` and ``ab_loop`` (H200-like noise and costs for ``fp4bench ab`` on the
in-process workers, and its runner's decisions without them, for its detection rates) and
``sim/`` (a simulated Blackwell machine for child ``pytest bench`` runs).
"""
