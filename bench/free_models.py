"""Free models: a target and a draft whose decode costs (almost) nothing.

`bench.round_breakdown` runs the real decoding loop with them to measure what a round costs
outside the models (sampling, acceptance, commit, loop control).
"""

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

# Row-constant logit shift: changes no softmax/argmax, defeats hoisting.
SHIFT = 1e-6


class FreeModel:
    """A `DecodeModel` with no network: every window entry gets the same logits row.

    `decode` returns `logits_row` broadcast to [B, W, V] plus row constants that depend on
    the prompt length and the position (1e-6 * (length % 2) + 1e-6 * (position % 2)): they
    leave every softmax and argmax unchanged but make the logits depend on the loop's data,
    so XLA cannot hoist the sampling or acceptance work that consumes them out of a loop.
    Two FreeModels with the same row agree exactly, so a free pair accepts every draft. The
    cache is int32 [B], the last position written.

    Args:
      logits_row: float [V]; put -inf on the EOS id to keep rows from stopping.
      eos_id: the EOS id the loop is compiled with (the real pair's).
      pad_id: pad / decoder start id.
    """

    def __init__(self, logits_row, eos_id: Optional[int], pad_id: int = 0):
        self._row = np.asarray(logits_row, dtype=np.float32).reshape(-1)
        self._eos_id = eos_id
        self._pad_id = pad_id

    @property
    def vocab_size(self) -> int:
        return int(self._row.shape[0])

    @property
    def eos_id(self) -> Optional[int]:
        return self._eos_id

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def max_prompt_length(self) -> Optional[int]:
        return None

    def prepare(self, prompt_ids, prompt_lengths, max_length: int):
        """Returns (context = per-row logits float32 [B, V], cache = int32 [B] zeros)."""
        del prompt_ids, max_length
        prompt_lengths = tf.cast(prompt_lengths, tf.int32)
        shift = SHIFT * tf.cast(prompt_lengths % 2, tf.float32)[:, None]       # [B, 1]
        return tf.constant(self._row)[None, :] + shift, tf.zeros_like(prompt_lengths)

    def decode(self, context, cache, ids, positions):
        """ids, positions int32 [B, W] -> (float32 [B, W, V], int32 [B])."""
        del cache, ids
        positions = tf.convert_to_tensor(positions, tf.int32)
        shift = SHIFT * tf.cast(positions % 2, tf.float32)[:, :, None]        # [B, W, 1]
        return context[:, None, :] + shift, positions[:, -1]


def free_pair(vocab_size: int, eos_id: Optional[int], pad_id: int = 0,
              seed: int = 0) -> Tuple[FreeModel, FreeModel]:
    """(target, draft) FreeModels sharing one random logits row (EOS at -inf)."""
    row = np.random.RandomState(seed).normal(size=vocab_size).astype(np.float32)
    if eos_id is not None:
        row[eos_id] = -np.inf
    return FreeModel(row, eos_id, pad_id), FreeModel(row, eos_id, pad_id)
