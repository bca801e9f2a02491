"""What a ``CaseRunner`` is built from, and the same as a worker process's ``init`` message.

A runner is built in the pytest session and in every worker process (``pytest --fp4-isolate``,
``fp4bench ab``, ``fp4bench units``): the parent decides the settings and the worker builds its
runner from them (``run.factory``), so both sides measure alike. ``to_init`` and ``from_init``
are the one place that knows the ``init`` message's fields and their defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from fp4bench.measure.replays import DEFAULT_REPLAYS
from fp4bench.measure.timing import TimingConfig


@dataclass(frozen=True)
class RunnerSettings:
    """A runner's device, backend modules, timing and copy rule."""

    #: ``cuda:0``, ``cpu``, ...; None: ``cuda:0`` where CUDA is available, else ``cpu``
    device: str | None = None
    #: backend modules loaded into the registry before the device is set up (``--fp4-plugin``)
    plugins: tuple[str, ...] = ()
    timing: TimingConfig = field(default_factory=TimingConfig)
    cold_l2: bool = True
    seed: int = 0
    #: rotating copies at least (None: ``measure.copies.MIN_COPIES`` on a GPU, one on a CPU)
    min_copies: int | None = None
    #: replays with changing inputs checked per case (``measure.replays``; 0: none)
    replays: int = DEFAULT_REPLAYS

    def to_init(self) -> dict[str, Any]:
        """The worker's ``init`` message (``run.worker.protocol``) without its ``op``."""
        return {"device": self.device, "plugins": list(self.plugins), "timing": asdict(self.timing),
                "cold_l2": self.cold_l2, "seed": self.seed, "min_copies": self.min_copies,
                "replays": self.replays}

    @classmethod
    def from_init(cls, init: Mapping[str, Any]) -> RunnerSettings:
        """The settings an ``init`` message names; a field it leaves out takes its default."""
        return cls(device=init.get("device") or None, plugins=tuple(init.get("plugins") or ()),
                   timing=TimingConfig(**(init.get("timing") or {})), cold_l2=bool(init.get("cold_l2", True)),
                   seed=int(init.get("seed", 0)),
                   min_copies=None if init.get("min_copies") is None else int(init["min_copies"]),
                   replays=int(init.get("replays", DEFAULT_REPLAYS)))
