"""Latency metrics: ms per generated token and the distribution of per-sequence times.

The keys of `summarize` are a contract (summary.json `latency{...}`, docs/design.md section 6):
`ms_per_token, seq_time_mean_s, seq_time_std_s, seq_time_p50_s, seq_time_p90_s,
seq_time_p99_s, num_tokens`. Undefined values (no tokens) are None, which JSON writes as
null. `LatencyAccumulator` is the mergeable form for a Beam CombineFn.
"""

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

KEYS = ("ms_per_token", "seq_time_mean_s", "seq_time_std_s", "seq_time_p50_s",
        "seq_time_p90_s", "seq_time_p99_s", "num_tokens")


def ms_per_token(total_time_s: float, total_tokens: int) -> Optional[float]:
    """Milliseconds per generated token; None when no token was generated.

    Raises:
      ValueError: on a negative or non-finite time, or a negative token count.
    """
    if not math.isfinite(total_time_s) or total_time_s < 0:
        raise ValueError(f"total_time_s must be finite and >= 0, got {total_time_s}")
    if total_tokens < 0:
        raise ValueError(f"total_tokens must be >= 0, got {total_tokens}")
    if total_tokens == 0:
        return None
    return 1000.0 * total_time_s / total_tokens


def summarize(seq_times_s: Sequence[float], num_tokens: Sequence[int],
              total_time_s: Optional[float] = None) -> dict:
    """Latency summary of a run.

    Args:
      seq_times_s: Wall time of each generated sequence, in seconds (for batched decoding,
        the time of the batch the sequence was in).
      num_tokens: Tokens generated for each sequence, aligned with `seq_times_s`.
      total_time_s: Wall time of the whole run, if it differs from the sum of the
        sequence times (batches overlap rows); default: the sum.

    Returns:
      A dict with exactly the keys of KEYS. Std is the population std (ddof=0);
      percentiles use linear interpolation.
    """
    times = np.asarray(seq_times_s, dtype=np.float64)
    tokens = np.asarray(num_tokens, dtype=np.int64)
    if times.ndim != 1 or times.size == 0:
        raise ValueError("seq_times_s must be a non-empty 1-D sequence")
    if tokens.shape != times.shape:
        raise ValueError(f"{times.size} sequence times but {tokens.size} token counts")
    if not np.all(np.isfinite(times)) or np.any(times < 0):
        raise ValueError("sequence times must be finite and >= 0")
    if np.any(tokens < 0):
        raise ValueError("token counts must be >= 0")
    total_tokens = int(tokens.sum())
    total = float(times.sum()) if total_time_s is None else float(total_time_s)
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    return {
        "ms_per_token": ms_per_token(total, total_tokens),
        "seq_time_mean_s": float(times.mean()),
        "seq_time_std_s": float(times.std()),
        "seq_time_p50_s": float(p50),
        "seq_time_p90_s": float(p90),
        "seq_time_p99_s": float(p99),
        "num_tokens": total_tokens,
    }


@dataclasses.dataclass
class LatencyAccumulator:
    """Mergeable collection of per-sequence times (percentiles need every value).

    `create()`, `add(time_s, tokens)`, `merge(accumulators)`, `extract()` map one to one
    onto a Beam CombineFn's create_accumulator/add_input/merge_accumulators/extract_output.
    `total_time_s`, if set on any part, is added up across merges (e.g. one per batch).
    """

    seq_times_s: list = dataclasses.field(default_factory=list)
    num_tokens: list = dataclasses.field(default_factory=list)
    total_time_s: Optional[float] = None

    @classmethod
    def create(cls) -> "LatencyAccumulator":
        return cls()

    def add(self, seq_time_s: float, tokens: int) -> "LatencyAccumulator":
        self.seq_times_s.append(float(seq_time_s))
        self.num_tokens.append(int(tokens))
        return self

    def add_total_time(self, seconds: float) -> "LatencyAccumulator":
        """Adds wall time of the run not to be inferred from sequence times (a batch)."""
        self.total_time_s = (self.total_time_s or 0.0) + float(seconds)
        return self

    @classmethod
    def merge(cls, accumulators) -> "LatencyAccumulator":
        out = cls()
        for acc in accumulators:
            out.seq_times_s.extend(acc.seq_times_s)
            out.num_tokens.extend(acc.num_tokens)
            if acc.total_time_s is not None:
                out.add_total_time(acc.total_time_s)
        return out

    def extract(self) -> dict:
        return summarize(self.seq_times_s, self.num_tokens, self.total_time_s)
