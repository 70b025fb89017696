"""An n-gram model with an exact probability table: a cheap draft and an enumerable target."""

from typing import Iterable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tfspec.models import history as history_lib


class NGram(history_lib.HistoryModel):
    """Next-token log-probabilities looked up from the previous n - 1 tokens.

    Args:
      log_probs: float [V] * (n - 1) + [V]. Leading axes index the previous n - 1 tokens,
        most recent last; the last axis is the next token. -inf marks impossible tokens.
        Context before the start of a sequence is id 0.
      eos_id: end-of-sequence id, or None (the default: an NGram has none unless given).
      pad_id: id written after a row ends; also the decoder start id.
    """

    def __init__(self, log_probs, eos_id: Optional[int] = None, pad_id: int = 0):
        table = np.asarray(log_probs, dtype=np.float32)
        if table.ndim < 1 or any(d != table.shape[-1] for d in table.shape):
            raise ValueError(
                f"NGram log_probs must have shape [V] * n, got {list(table.shape)}")
        self.order = table.ndim
        vocab_size = int(table.shape[-1])
        if eos_id is not None and not 0 <= eos_id < vocab_size:
            raise ValueError(f"eos_id {eos_id} is outside the vocabulary [0, {vocab_size})")
        super().__init__(vocab_size, eos_id, pad_id)
        self.log_probs = table
        # Flattened to [V ** (n - 1), V] so a context is one row index.
        self._table = tf.constant(table.reshape(-1, self._vocab_size))

    @classmethod
    def fit(cls, sequences: Iterable[Sequence[int]], order: int, vocab_size: int,
            smoothing: float = 1.0, eos_id: Optional[int] = None) -> "NGram":
        """Counts n-grams in token data, with add-`smoothing` (Laplace) estimates.

        This is the bigram draft of Leviathan et al. when order = 2. Each sequence is
        preceded by n - 1 zeros, matching the start-of-sequence convention.
        """
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        if smoothing < 0:
            raise ValueError(f"smoothing must be >= 0, got {smoothing}")
        counts = np.zeros([vocab_size] * order, dtype=np.float64)
        for seq in sequences:
            padded = [0] * (order - 1) + [int(t) for t in seq]
            if padded and (min(padded) < 0 or max(padded) >= vocab_size):
                raise ValueError(f"token ids must be in [0, {vocab_size}), got {seq!r}")
            for i in range(order - 1, len(padded)):
                counts[tuple(padded[i - order + 1:i + 1])] += 1
        counts += smoothing
        totals = counts.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_probs = np.where(totals > 0, np.log(counts) - np.log(totals), -np.log(vocab_size))
        return cls(log_probs, eos_id=eos_id)

    def decode(self, context, cache, ids, positions):
        """Writes the window, then looks up each entry's next-token row of the table.

        Args:
          context: static int, the prompt width S.
          cache: `History`.
          ids: int32 [batch, W].
          positions: int32 [batch, W].

        Returns:
          (float32 [batch, W, V] log-probabilities, History).
        """
        cache, columns = history_lib.write_window(cache, ids, positions, context)
        context_len = self.order - 1
        if context_len == 0:
            flat = tf.zeros_like(columns)
        else:
            # Columns columns - context_len + 1 .. columns; negatives are "before the start".
            offsets = tf.range(-context_len + 1, 1)
            cols = columns[..., None] + offsets                                # [b, W, n-1]
            tokens = tf.gather(cache.token_ids, tf.maximum(cols, 0), batch_dims=1)
            tokens = tf.where(cols >= 0, tokens, 0)
            place = self._vocab_size ** tf.range(context_len - 1, -1, -1)
            flat = tf.reduce_sum(tokens * place, axis=-1)                      # [b, W]
        return tf.gather(self._table, flat), cache
