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

Only batch-1 records are fitted: a batched call's time is shared by rows of different
rounds, so a row's time says nothing about its own iterations.

The accumulator keeps sufficient statistics (five sums), so it merges across workers and
resumed lines like a Beam CombineFn's accumulator.
"""

import dataclasses
import math
from typing import Iterable, Optional

KEYS = ("requests", "fixed_s", "iteration_s")
MIN_REQUESTS = 3
"""Fewer requests than this, or all of one length, give no fit (None)."""


@dataclasses.dataclass
class RequestCostAccumulator:
    """Sums for the least-squares line of request seconds on loop iterations.

    `create()`, `add(time_s, iterations)`, `merge(accumulators)`, `extract()` map one to one
    onto a Beam CombineFn's create_accumulator/add_input/merge_accumulators/extract_output.
    """

    requests: int = 0
    sum_x: float = 0.0   # iterations
    sum_y: float = 0.0   # seconds
    sum_xx: float = 0.0
    sum_xy: float = 0.0

    @classmethod
    def create(cls) -> "RequestCostAccumulator":
        return cls()

    def add(self, time_s: float, iterations: int) -> "RequestCostAccumulator":
        """Adds one batch-1 request: its wall time (s) and its loop iterations."""
        x, y = float(iterations), float(time_s)
        if not (math.isfinite(y) and y >= 0 and x >= 0):
            raise ValueError(f"a request needs time_s >= 0 and iterations >= 0, got "
                             f"{time_s} and {iterations}")
        self.requests += 1
        self.sum_x += x
        self.sum_y += y
        self.sum_xx += x * x
        self.sum_xy += x * y
        return self

    @classmethod
    def merge(cls, accumulators: Iterable["RequestCostAccumulator"]
              ) -> "RequestCostAccumulator":
        out = cls()
        for acc in accumulators:
            out.requests += acc.requests
            out.sum_x += acc.sum_x
            out.sum_y += acc.sum_y
            out.sum_xx += acc.sum_xx
            out.sum_xy += acc.sum_xy
        return out

    def extract(self) -> Optional[dict]:
        """{requests, fixed_s, iteration_s} of the fitted line; None with fewer than
        MIN_REQUESTS requests, iterations all equal, or a slope that is not positive (noise
        on requests of near-equal length)."""
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
        return {"requests": n, "fixed_s": max(intercept, 0.0), "iteration_s": slope}
