"""Acceptance statistics of speculative decoding, aggregated over rows and examples.

Inputs are the per-row counters of `tfspec.DecodeStats` (docs/design.md section 2): `rounds`,
`drafted`, `accepted`, `accepted_per_position [batch, k]`, `beta_sum`. Definitions:

* acceptance_rate = sum(accepted) / sum(drafted): the fraction of drafted tokens kept.
* beta_mean = sum(beta_sum) / number of verified positions, where beta at a position is
  sum_x min(target(x), draft(x)); its expectation is Leviathan et al.'s alpha. The number of
  verified positions defaults to `drafted` (one verification per drafted token).
* mean_tokens_per_round = tokens emitted / sum(rounds); tokens emitted default to
  accepted + rounds (each round emits its accepted tokens plus one correction or bonus
  token; a round cut short by EOS or the length limit emits fewer, so pass the real
  token counts when you have them).
* per_position[i] = sum over rows of accepted_per_position[:, i] / sum(rounds): the
  fraction of rounds whose i-th drafted token was accepted.

Ratios with a zero denominator (k = 0, no rounds) are None. `AcceptanceAccumulator` has
create/add/merge/extract so a Beam CombineFn can wrap it; it is plain Python + numpy.
"""

import dataclasses
from typing import Any, Optional

import numpy as np

KEYS = ("acceptance_rate", "beta_mean", "mean_tokens_per_round", "per_position")


def _ratio(numerator, denominator) -> Optional[float]:
    return float(numerator) / float(denominator) if denominator else None


@dataclasses.dataclass
class AcceptanceAccumulator:
    """Sums of the counters over any number of rows; merging is adding."""

    rows: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    verified: int = 0
    tokens: int = 0
    beta_sum: float = 0.0
    accepted_per_position: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def create(cls) -> "AcceptanceAccumulator":
        return cls()

    def add(self, rounds, drafted, accepted, beta_sum, accepted_per_position,
            verified=None, tokens=None) -> "AcceptanceAccumulator":
        """Adds one row or a batch of rows (each argument scalar or shaped [batch]).

        Args:
          rounds: Speculative rounds of each row.
          drafted: Tokens drafted by each row.
          accepted: Drafted tokens accepted by each row.
          beta_sum: Sum of beta over each row's verified positions.
          accepted_per_position: [k] for one row or [batch, k]: per position, the number of
            rounds in which that position's drafted token was accepted.
          verified: Verified positions of each row (default: `drafted`).
          tokens: Tokens emitted by each row (default: accepted + rounds).
        """
        rounds = np.atleast_1d(np.asarray(rounds, dtype=np.int64))
        drafted = np.atleast_1d(np.asarray(drafted, dtype=np.int64))
        accepted = np.atleast_1d(np.asarray(accepted, dtype=np.int64))
        beta_sum = np.atleast_1d(np.asarray(beta_sum, dtype=np.float64))
        per_pos = np.asarray(accepted_per_position, dtype=np.int64)
        if per_pos.ndim == 1:
            per_pos = per_pos[None, :]
        batch = rounds.shape[0]
        for name, value in (("drafted", drafted), ("accepted", accepted),
                            ("beta_sum", beta_sum)):
            if value.shape != (batch,):
                raise ValueError(f"{name} has shape {value.shape}, expected ({batch},)")
        if per_pos.ndim != 2 or per_pos.shape[0] != batch:
            raise ValueError(f"accepted_per_position has shape {per_pos.shape}, "
                             f"expected ({batch}, k)")
        if np.any(accepted > drafted) or np.any(rounds < 0) or np.any(accepted < 0):
            raise ValueError("counts must satisfy 0 <= accepted <= drafted and rounds >= 0")
        verified = drafted if verified is None else np.atleast_1d(
            np.asarray(verified, dtype=np.int64))
        tokens = accepted + rounds if tokens is None else np.atleast_1d(
            np.asarray(tokens, dtype=np.int64))
        self._grow(per_pos.shape[1])
        self.rows += batch
        self.rounds += int(rounds.sum())
        self.drafted += int(drafted.sum())
        self.accepted += int(accepted.sum())
        self.verified += int(verified.sum())
        self.tokens += int(tokens.sum())
        self.beta_sum += float(beta_sum.sum())
        self.accepted_per_position[:per_pos.shape[1]] += per_pos.sum(axis=0)
        return self

    def add_stats(self, stats: Any, tokens=None) -> "AcceptanceAccumulator":
        """Adds a `tfspec.DecodeStats` (or anything with its per-row counter attributes)."""
        return self.add(stats.rounds, stats.drafted, stats.accepted, stats.beta_sum,
                        stats.accepted_per_position,
                        verified=getattr(stats, "verified", None), tokens=tokens)

    def _grow(self, k: int) -> None:
        if k > self.accepted_per_position.shape[0]:
            grown = np.zeros(k, dtype=np.int64)
            grown[:self.accepted_per_position.shape[0]] = self.accepted_per_position
            self.accepted_per_position = grown

    @classmethod
    def merge(cls, accumulators) -> "AcceptanceAccumulator":
        out = cls()
        for acc in accumulators:
            out._grow(acc.accepted_per_position.shape[0])
            out.rows += acc.rows
            out.rounds += acc.rounds
            out.drafted += acc.drafted
            out.accepted += acc.accepted
            out.verified += acc.verified
            out.tokens += acc.tokens
            out.beta_sum += acc.beta_sum
            out.accepted_per_position[:acc.accepted_per_position.shape[0]] += (
                acc.accepted_per_position)
        return out

    def extract(self) -> dict:
        """{acceptance_rate, beta_mean, mean_tokens_per_round, per_position[]}."""
        return {
            "acceptance_rate": _ratio(self.accepted, self.drafted),
            "beta_mean": _ratio(self.beta_sum, self.verified),
            "mean_tokens_per_round": _ratio(self.tokens, self.rounds),
            "per_position": [_ratio(a, self.rounds) for a in self.accepted_per_position],
        }


def summarize(rounds, drafted, accepted, beta_sum, accepted_per_position, verified=None,
              tokens=None) -> dict:
    """Acceptance metrics of a batch of rows in one call (see AcceptanceAccumulator.add)."""
    return AcceptanceAccumulator().add(rounds, drafted, accepted, beta_sum,
                                       accepted_per_position, verified, tokens).extract()
