"""The benches' common loop: two things measured in alternating order, each result printed as it
comes, and the median of each figure per thing (a busy 2-core host drifts; alternating and
medians keep that drift from favouring one side)."""
from __future__ import annotations

import statistics
import sys
from typing import Callable, Sequence


def alternate(pair: Sequence[str], rounds: int, measure: Callable[[str, int], tuple[float, ...]],
              row: Callable[[int, str, tuple[float, ...]], str]) -> dict[str, tuple[float, ...]]:
    """`measure(name, round)` for both names each round, the order swapped every round; prints
    `row(round number, name, result)` after each; returns the medians of each figure per name."""
    figures: dict[str, list[tuple[float, ...]]] = {name: [] for name in pair}
    for r in range(rounds):
        for name in (pair if r % 2 == 0 else pair[::-1]):
            result = measure(name, r)
            figures[name].append(result)
            print(row(r + 1, name, result), flush=True)
    return {name: tuple(statistics.median(col) for col in zip(*results)) for name, results in figures.items()}


def not_accepted_exit(bad: int) -> int:
    """An HTTP bench's exit code: 1, with a line on stderr, when `bad` requests were not accepted; else 0."""
    if bad:
        print(f"{bad} requests not accepted", file=sys.stderr)
    return 1 if bad else 0
