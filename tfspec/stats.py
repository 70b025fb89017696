"""Per-row decoding counters and the statistics derived from them."""

import dataclasses

import numpy as np


@dataclasses.dataclass
class DecodeStats:
    """Per-row counters of one `generate` call (numpy arrays, first axis = batch).

    Attributes:
      rounds: int32 [batch], loop rounds the row took part in (one target call each).
      drafted: int32 [batch], draft tokens proposed (k per round).
      accepted: int32 [batch], draft tokens accepted by the rule.
      verified: int32 [batch], draft positions the rule examined (min(accepted + 1, k) per
        round); the denominator of `beta_mean`.
      accepted_per_position: int32 [batch, k], rounds in which draft position i was accepted.
      beta_sum: float32 [batch], sum over verified positions of sum_x min(target(x), draft(x)).
      tokens: int32 [batch], tokens emitted (the row's length).
    """

    rounds: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    verified: np.ndarray
    accepted_per_position: np.ndarray
    beta_sum: np.ndarray
    tokens: np.ndarray

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted over all rows (nan when nothing was drafted)."""
        drafted = int(np.sum(self.drafted))
        return float(np.sum(self.accepted)) / drafted if drafted else float("nan")

    @property
    def beta_mean(self) -> float:
        """Mean exact overlap sum_x min(target, draft): the paper's alpha, estimated."""
        verified = int(np.sum(self.verified))
        return float(np.sum(self.beta_sum)) / verified if verified else float("nan")

    @property
    def mean_tokens_per_round(self) -> float:
        rounds = int(np.sum(self.rounds))
        return float(np.sum(self.tokens)) / rounds if rounds else float("nan")

    @property
    def per_position_acceptance(self) -> np.ndarray:
        """float [k]: fraction of rounds in which draft position i was accepted."""
        rounds = float(np.sum(self.rounds))
        totals = np.sum(self.accepted_per_position, axis=0)
        return totals / rounds if rounds else np.full_like(totals, np.nan, dtype=float)

    def row(self, i: int) -> "DecodeStats":
        """The counters of row i, as a batch of one."""
        return DecodeStats(**{f.name: getattr(self, f.name)[i:i + 1]
                              for f in dataclasses.fields(self)})

    @classmethod
    def concatenate(cls, parts) -> "DecodeStats":
        """Joins the rows of several calls (all with the same k)."""
        parts = list(parts)
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts], axis=0)
                      for f in dataclasses.fields(cls)})

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}
