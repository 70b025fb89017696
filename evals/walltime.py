"""The walltime model of speculative decoding (Leviathan et al. 2022, Theorem 3.8).

Lettering as in the paper: `a` is alpha, the acceptance rate (expected overlap
E[sum_x min(p, q)]); `k` is gamma, the number of drafted tokens per round; `c` is the cost
ratio of one draft step to one target step. Then

    expected tokens per round  = (1 - a**(k+1)) / (1 - a)           (k + 1 at a = 1)
    predicted walltime speedup = (1 - a**(k+1)) / ((1 - a) (k c + 1))

The geometric sum is evaluated as sum_{i=0..k} a**i, which is exact at a = 1 and has no
cancellation near it.
"""

import math

import numpy as np


def _check(a: float, k: int, c: float = 0.0) -> None:
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"acceptance rate a must be in [0, 1], got {a}")
    if int(k) != k or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k}")
    if not math.isfinite(c) or c < 0:
        raise ValueError(f"cost ratio c must be finite and >= 0, got {c}")


def draft_cost_ratio(draft_step_s: float, target_step_s: float) -> float:
    """c = time of one draft step / time of one target step (both measured, seconds).

    Raises:
      ValueError: if either time is not finite, the draft time is negative, or the target
        time is not positive.
    """
    if not (math.isfinite(draft_step_s) and math.isfinite(target_step_s)):
        raise ValueError("step times must be finite")
    if draft_step_s < 0 or target_step_s <= 0:
        raise ValueError(f"need draft_step_s >= 0 and target_step_s > 0, got "
                         f"{draft_step_s} and {target_step_s}")
    return draft_step_s / target_step_s


def expected_tokens_per_round(a: float, k: int) -> float:
    """(1 - a**(k+1)) / (1 - a): tokens emitted per target pass; k + 1 at a = 1."""
    _check(a, k)
    return float(np.sum(np.float64(a) ** np.arange(int(k) + 1)))


def predicted_speedup(a: float, k: int, c: float) -> float:
    """(1 - a**(k+1)) / ((1 - a) (k c + 1)): predicted walltime improvement factor.

    k = 0 is plain autoregressive decoding and gives 1.
    """
    _check(a, k, c)
    return expected_tokens_per_round(a, k) / (k * c + 1.0)


def optimal_k(a: float, c: float, k_max: int = 32) -> int:
    """The k in [0, k_max] with the highest predicted speedup (the smallest on ties).

    k = 0 (no speculation) wins when no k > 0 beats 1, e.g. when the draft is too costly.
    """
    _check(a, 0, c)
    if int(k_max) != k_max or k_max < 0:
        raise ValueError(f"k_max must be an integer >= 0, got {k_max}")
    speedups = [predicted_speedup(a, k, c) for k in range(int(k_max) + 1)]
    return int(np.argmax(speedups))
