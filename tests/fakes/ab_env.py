"""A fake "environment" for ``fp4bench ab`` tests: one dense backend whose behaviour is set by
the worker's environment variables, so two workers on the same interpreter act as two stacks.

``ab-spin`` writes the real bf16 product (computed once, then copied: the correctness check
passes and the matmul's CPU-load-dependent time stays out of the way) and then spins
``FAKE_SPIN_S`` (default 2 ms) times ``1 + FAKE_SLOWDOWN`` on the clock in use (``clock.spin``: a
busy-wait in a real worker process, exactly that simulated time in an in-process fake worker,
``fakes.inproc_worker``). ``FAKE_VERSION`` is its reported version; ``FAKE_TACTICS`` the labels it lists.
``FAKE_DIE_ONCE=PATH``: the first process to make its 40th call creates PATH and aborts (a worker
that dies partway through its rounds); every later process sees PATH and lives.
``FAKE_PIN_LOG=PATH``: each worker appends ``<pid> <CUDA_VISIBLE_DEVICES>`` to PATH when it loads
this module (the environment the process really started with). ``FAKE_DEAD_GPU=UUID``: a worker
pinned to that GPU fails to load this module (a GPU whose workers cannot start).
"""

import os

import torch

from fp4bench import clock
from fp4bench.backends.base import Availability, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16

if os.environ.get("FAKE_PIN_LOG"):
    with open(os.environ["FAKE_PIN_LOG"], "a") as log:
        log.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')}\n")
if os.environ.get("FAKE_DEAD_GPU") and os.environ.get("CUDA_VISIBLE_DEVICES") == os.environ["FAKE_DEAD_GPU"]:
    raise RuntimeError(f"simulated: GPU {os.environ['FAKE_DEAD_GPU']} is gone")


class AbSpin(TorchBF16):
    name = "ab-spin"
    kinds = frozenset({"dense"})

    def availability(self, device: torch.device) -> Availability:
        return Availability.yes(os.environ.get("FAKE_VERSION", "1.0"), "fake environment")

    def tactics(self, problem, device):
        labels = os.environ.get("FAKE_TACTICS", "t0").split(",")
        return [Tactic(label, label) for label in labels]

    calls = 0

    def run(self, prepared, tactic):
        marker = os.environ.get("FAKE_DIE_ONCE")
        if marker:
            AbSpin.calls += 1
            if AbSpin.calls == 40 and not os.path.exists(marker):
                open(marker, "w").close()
                os.abort()
        if "product" not in prepared.args:
            prepared.args["product"] = super().run(prepared, tactic).clone()
        out = prepared.out
        out.copy_(prepared.args["product"])
        clock.spin(float(os.environ.get("FAKE_SPIN_S", "0.002")) * (1 + float(os.environ.get("FAKE_SLOWDOWN", "0"))))
        return out


BACKENDS = [AbSpin()]
