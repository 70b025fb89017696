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
from typing import Mapping, NamedTuple, Optional, Tuple

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


# --------------------------------------------------------------------- calibrated model
#
# The formula above assumes a round costs k draft steps plus ONE target step and nothing
# else. On real hardware the (k + 1)-wide verify costs more than a one-token step (on
# XLA:CPU about 1.5 steps at k = 4), every round has fixed work (acceptance, commit, loop
# control), and every request pays for the encoders once. The calibrated model keeps the
# formula's expected tokens per round and replaces its costs by measured ones:
#
#     round_s(k)      = round_intercept_s + round_per_k_s * k     (fit over measured k)
#     time(N tokens)  = fixed_s + (N / E[tokens per round]) * round_s(k)   (speculative)
#     time(N tokens)  = ar_fixed_s + N * target_step_s                     (autoregressive)
#     speed-up        = time_autoregressive / time_speculative
#
# With fixed costs 0, round_intercept_s = target_step_s and round_per_k_s = c *
# target_step_s, it is exactly `predicted_speedup`.
#
# Where the run itself measured a k (`fit_in_run`: least-squares lines of its batch-1
# requests' seconds on their rounds, `evals.request_cost`), round_s(k) and the speculative
# fixed cost at that k are the measured ones, and the line only fills the ks between and
# beyond them. A line cannot follow the verify's steps in k anyway (on CPU `tfspec.kernels`
# passes the verify's rows in blocks of six, so a round costs a block more from k = 6 on).


class RoundCost(NamedTuple):
    """Measured decode costs of one target/draft pair (seconds).

    Attributes:
      target_step_s: one autoregressive target step (per token).
      round_intercept_s: round time at k = 0 of the linear fit round_s(k) = a + b k.
      round_per_k_s: the fit's slope: what one more drafted token adds to a round.
      ar_fixed_s: per-request cost of autoregressive decoding outside the steps (encoder,
        call overhead); 0 if unknown.
      spec_fixed_s: the same for speculative decoding (both encoders); 0 if unknown.
      measured: ((k, round_s, spec_fixed_s), ...) measured at those ks, which `round_s` and
        `spec_fixed` return instead of the line's values; None: the line everywhere.
    """

    target_step_s: float
    round_intercept_s: float
    round_per_k_s: float
    ar_fixed_s: float = 0.0
    spec_fixed_s: float = 0.0
    measured: Optional[Tuple[Tuple[int, float, float], ...]] = None

    def _measured(self, k: int) -> Optional[Tuple[int, float, float]]:
        return next((m for m in self.measured or () if m[0] == k), None)

    def round_s(self, k: int) -> float:
        """Time of one speculative round drafting k tokens."""
        measured = self._measured(k)
        if measured is not None:
            return measured[1]
        return self.round_intercept_s + self.round_per_k_s * k

    def spec_fixed(self, k: int) -> float:
        """Per-request fixed cost of speculative decoding at k."""
        measured = self._measured(k)
        return measured[2] if measured is not None else self.spec_fixed_s

    def verify_in_target_steps(self, k: int, draft_step_s: float) -> float:
        """Round time minus k draft steps, in target steps (the formula assumes 1)."""
        return (self.round_s(k) - k * draft_step_s) / self.target_step_s


def fit_round_cost(target_step_s: float, round_s_by_k: Mapping[int, float],
                   draft_step_s: Optional[float] = None, ar_fixed_s: float = 0.0,
                   spec_fixed_s: float = 0.0) -> RoundCost:
    """Least-squares line through measured round times.

    Args:
      target_step_s: measured autoregressive target step.
      round_s_by_k: k -> measured seconds per round (k >= 1).
      draft_step_s: measured draft step; the slope when only one k was measured.
      ar_fixed_s, spec_fixed_s: measured per-request fixed costs.

    Raises:
      ValueError: no positive target step or round time, or one k and no draft step.
    """
    ks = sorted(int(k) for k in round_s_by_k)
    times = [float(round_s_by_k[k]) for k in ks]
    if not (math.isfinite(target_step_s) and target_step_s > 0):
        raise ValueError(f"target_step_s must be finite and > 0, got {target_step_s}")
    if not ks or any(k < 1 for k in ks) or not all(math.isfinite(t) and t > 0
                                                    for t in times):
        raise ValueError(f"need round times > 0 at k >= 1, got {dict(round_s_by_k)}")
    if len(ks) == 1:
        if draft_step_s is None or not math.isfinite(draft_step_s):
            raise ValueError("one measured k needs draft_step_s for the slope")
        slope = max(float(draft_step_s), 0.0)
        intercept = times[0] - slope * ks[0]
    else:
        slope, intercept = np.polyfit(np.asarray(ks, np.float64),
                                      np.asarray(times, np.float64), 1)
        slope = max(float(slope), 0.0)  # More drafting never makes a round cheaper.
        intercept = float(np.mean(times) - slope * np.mean(ks))
    return RoundCost(float(target_step_s), float(intercept), slope,
                     max(float(ar_fixed_s), 0.0), max(float(spec_fixed_s), 0.0))


def fit_in_run(target_step_s: float, ar_fixed_s: float,
               measured: Mapping[int, Tuple[float, float]],
               program: Optional[RoundCost] = None) -> RoundCost:
    """The `RoundCost` of costs measured in the run itself.

    Args:
      target_step_s, ar_fixed_s: the autoregressive requests' line (seconds per step, and
        per request).
      measured: k -> (round_s, spec_fixed_s), each speculative k's requests' line.
      program: the calibration program's `RoundCost`, whose slope in k extends a single
        measured k to the others; None needs two measured ks.

    Returns:
      A `RoundCost` that returns the measured values at the measured ks, and elsewhere a
      least-squares line through the measured rounds (with one measured k: the program's
      slope through it), with the median measured fixed cost.

    Raises:
      ValueError: no positive target step or round time, or one measured k and no program
        (`fit_round_cost`'s checks).
    """
    ks = sorted(int(k) for k in measured)
    # fit_round_cost checks the step and the rounds, and wants a slope for one k.
    line = fit_round_cost(target_step_s, {k: measured[k][0] for k in ks},
                          draft_step_s=None if program is None else program.round_per_k_s)
    fixed = [max(float(measured[k][1]), 0.0) for k in ks]
    return line._replace(
        ar_fixed_s=max(float(ar_fixed_s), 0.0), spec_fixed_s=float(np.median(fixed)),
        measured=tuple((k, float(measured[k][0]), f) for k, f in zip(ks, fixed)))


def calibrated_speedup(a: float, k: int, cost: RoundCost,
                       tokens_per_request: Optional[float] = None,
                       baseline_tokens_per_request: Optional[float] = None) -> float:
    """Predicted speed-up from measured costs (see the calibrated model above).

    Args:
      a: acceptance rate alpha.
      k: drafted tokens per round; 0 gives 1.
      cost: the measured `RoundCost`.
      tokens_per_request: mean generated tokens per speculative request, to charge the
        fixed costs; None leaves them out (the long-generation limit).
      baseline_tokens_per_request: mean generated tokens per autoregressive request, where
        they differ: sampling lets each mode answer at lengths of its own, and each mode's
        ms/token spreads its fixed cost over its own tokens (a speculative run that sampled
        22% fewer tokens measured 0.79x where one length for both predicted 0.91x). None:
        `tokens_per_request`.
    """
    _check(a, k)
    if k == 0:
        return 1.0
    round_s = cost.round_s(k)
    if round_s <= 0:
        raise ValueError(f"calibrated round time at k={k} is {round_s} s; refit the cost")
    tokens_per_round = expected_tokens_per_round(a, k)
    if tokens_per_request is None:
        return tokens_per_round * cost.target_step_s / round_s
    n = float(tokens_per_request)
    n_ar = n if baseline_tokens_per_request is None else float(baseline_tokens_per_request)
    # ms/token of each mode at its own request length: (fixed + n x per-token) / n.
    return (((cost.ar_fixed_s + n_ar * cost.target_step_s) / n_ar)
            / ((cost.spec_fixed(k) + n / tokens_per_round * round_s) / n))


def calibrated_optimal_k(a: float, cost: RoundCost, k_max: int = 32,
                         tokens_per_request: Optional[float] = None) -> int:
    """The k in [0, k_max] with the highest calibrated speed-up (smallest on ties), at one
    request length for both modes: a property of k, not of the lengths one run sampled."""
    _check(a, 0)
    speedups = [calibrated_speedup(a, k, cost, tokens_per_request)
                for k in range(int(k_max) + 1)]
    return int(np.argmax(speedups))
