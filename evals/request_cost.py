"""What one mode's requests cost, fitted to the run's own requests.

A request's wall time is a per-request part (the encoders over its prompt bucket, the panel
fingerprints, the call) plus one part per loop iteration (an autoregressive step, or a
speculative round). `RequestCostAccumulator` fits

    time_s = fixed_s + iteration_s x iterations

by least squares over one mode's requests, with `iterations` the record's `rounds` (an
autoregressive record counts one round per step). The calibrated walltime model
(`evals.walltime`) reads these costs (`evals.summary.in_run_costs`): measured in the run,
interleaved with the other modes example by example, they drift with the machine exactly as
the measured speed-up does, which a separate calibration program timed minutes apart on one
prompt cannot (the same round timed there cost 20-30% less than in the run, whose prompts
span several buckets and whose requests stop at EOS).

`RequestLengthAccumulator` fits the same seconds on the request's emitted tokens instead,

    time_s = fixed_s + token_s x tokens,

which is what a request of a given length costs in the mode, whatever mix of rounds (or,
for `k="auto"`, of speculative and autoregressive requests) produced it. The length-matched
speed-up (`evals.summary.matched_speedup`) compares two modes' lines at one length: at
temperature > 0 each mode samples answers of its own lengths, and with a fixed part of
~20 ms per request the plain ms per token partly measures those lengths.

Only batch-1 records are fitted: a batched call's time is shared by rows of different
rounds, so a row's time says nothing about its own iterations.

The accumulators keep sufficient statistics (five sums), so they merge across workers and
resumed lines like a Beam CombineFn's accumulator.
"""

import dataclasses
import math
from typing import Iterable, Optional, Tuple

KEYS = ("requests", "fixed_s", "iteration_s")
LENGTH_KEYS = ("requests", "mean_tokens", "fixed_s", "token_s")
MIN_REQUESTS = 3
"""Fewer requests than this, or all of one length, give no fit (None)."""


@dataclasses.dataclass
class LineAccumulator:
    """Sums for the least-squares line of request seconds y on a count x.

    `create()`, `add(...)` (the subclasses'), `merge(accumulators)`, `extract()` map one to
    one onto a Beam CombineFn's create_accumulator/add_input/merge_accumulators/
    extract_output.
    """

    requests: int = 0
    sum_x: float = 0.0   # the count: iterations or tokens
    sum_y: float = 0.0   # seconds
    sum_xx: float = 0.0
    sum_xy: float = 0.0

    @classmethod
    def create(cls):
        return cls()

    def _add(self, time_s: float, count: float, name: str):
        x, y = float(count), float(time_s)
        if not (math.isfinite(y) and y >= 0 and x >= 0):
            raise ValueError(f"a request needs time_s >= 0 and {name} >= 0, got "
                             f"{time_s} and {count}")
        self.requests += 1
        self.sum_x += x
        self.sum_y += y
        self.sum_xx += x * x
        self.sum_xy += x * y
        return self

    @classmethod
    def merge(cls, accumulators: Iterable["LineAccumulator"]):
        out = cls()
        for acc in accumulators:
            out.requests += acc.requests
            out.sum_x += acc.sum_x
            out.sum_y += acc.sum_y
            out.sum_xx += acc.sum_xx
            out.sum_xy += acc.sum_xy
        return out

    def line(self, clamp: bool = True) -> Optional[Tuple[float, float]]:
        """(intercept, slope) of the fitted line, the intercept clamped to >= 0 with
        `clamp`; None with fewer than MIN_REQUESTS requests, counts all equal, or a slope
        that is not positive (noise on requests of near-equal length)."""
        n = self.requests
        if n < MIN_REQUESTS:
            return None
        # Centred sums: var_x = sum (x - mean)^2, cov = sum (x - mean)(y - mean).
        var_x = self.sum_xx - self.sum_x * self.sum_x / n
        if var_x <= 1e-9 * max(self.sum_xx, 1.0):
            return None
        cov = self.sum_xy - self.sum_x * self.sum_y / n
        slope = cov / var_x
        if not slope > 0:
            return None
        intercept = (self.sum_y - slope * self.sum_x) / n
        return (max(intercept, 0.0) if clamp else intercept), slope


@dataclasses.dataclass
class RequestCostAccumulator(LineAccumulator):
    """Request seconds on loop iterations (`KEYS`)."""

    def add(self, time_s: float, iterations: int) -> "RequestCostAccumulator":
        """Adds one batch-1 request: its wall time (s) and its loop iterations."""
        return self._add(time_s, iterations, "iterations")

    def extract(self) -> Optional[dict]:
        """{requests, fixed_s, iteration_s} of the fitted line, or None (`line`)."""
        fit = self.line()
        if fit is None:
            return None
        return {"requests": self.requests, "fixed_s": fit[0], "iteration_s": fit[1]}


@dataclasses.dataclass
class RequestLengthAccumulator(LineAccumulator):
    """Request seconds on emitted tokens (`LENGTH_KEYS`)."""

    def add(self, time_s: float, tokens: int) -> "RequestLengthAccumulator":
        """Adds one batch-1 request: its wall time (s) and its emitted tokens."""
        return self._add(time_s, tokens, "tokens")

    def extract(self) -> Optional[dict]:
        """{requests, mean_tokens, fixed_s, token_s}: the fitted line and the mean length
        of the requests it was fitted to, or None (`line`). The intercept is not clamped:
        the line predicts requests near the mean length (where a least-squares line passes
        through the mean time), it is not a split into costs."""
        fit = self.line(clamp=False)
        if fit is None:
            return None
        return {"requests": self.requests, "mean_tokens": self.sum_x / self.requests,
                "fixed_s": fit[0], "token_s": fit[1]}


def seconds_at(length: dict, tokens: float) -> float:
    """A `RequestLengthAccumulator.extract` line's seconds for a request of `tokens`."""
    return float(length["fixed_s"]) + float(length["token_s"]) * float(tokens)
