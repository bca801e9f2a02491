"""The alternating order of timing rounds: A,B,B,A,A,B,B,A,...

Within one benchmark the two sides take turns in short rounds. ABBA (rather than ABAB) puts
each side first in half of the pairs, so a linear drift of the GPU's state (clocks settling,
the die warming up under a power cap) adds the same amount to both sides' rounds on average,
instead of always favouring the side that runs first.
"""

from __future__ import annotations

SIDES = ("A", "B")


def abba(pairs: int) -> list[str]:
    """``pairs`` rounds per side, as the sequence of sides: A,B then B,A, alternating."""
    if pairs < 1:
        raise ValueError(f"need at least one round per side, got {pairs}")
    out: list[str] = []
    for i in range(pairs):
        out += ["A", "B"] if i % 2 == 0 else ["B", "A"]
    return out
