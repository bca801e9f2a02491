"""Fake ``flashinfer.autotuner``: ``AutoTuner.get()``, the simulated process-wide tuner."""

from fp4sim_world import TUNER


class AutoTuner:
    @staticmethod
    def get():
        return TUNER
