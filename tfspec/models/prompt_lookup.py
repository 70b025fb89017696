"""Prompt-lookup drafting: copy what followed the most recent earlier match of the suffix.

The draft is deterministic, so its distribution is one-hot: accepting it with
min(1, target(x) / 1) and resampling from max(0, target - onehot) keeps the rule exact.
"""

from typing import Optional

import tensorflow as tf

from tfspec.models import history as history_lib


class PromptLookup(history_lib.HistoryModel):
    """A draft that proposes the token that followed the latest earlier occurrence of the
    current n-gram suffix (longest n first, n = max_ngram .. 1) in prompt ++ output.

    Example (max_ngram = 2): history [a b c d | a b] -> suffix "a b" last occurred at
    columns 0-1, followed by "c", so the draft proposes c; after c it proposes d.
    With no match at any n it proposes the last token again.

    Args:
      max_ngram: longest suffix to match.
      vocab_size: size of the one-hot distributions; None adopts the target's in `generate`.
    """

    def __init__(self, max_ngram: int = 3, vocab_size: Optional[int] = None, pad_id: int = 0):
        if max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
        super().__init__(vocab_size, None, pad_id)
        self.max_ngram = max_ngram

    def with_vocab_size(self, vocab_size: int) -> "PromptLookup":
        return PromptLookup(self.max_ngram, vocab_size, self._pad_id)

    def prepare(self, prompt_ids, prompt_lengths, max_length: int):
        """Returns (context = static prompt width S, cache = History)."""
        if self._vocab_size is None:
            raise ValueError("PromptLookup needs a vocab_size; pass it or let generate() "
                             "adopt the target's")
        return super().prepare(prompt_ids, prompt_lengths, max_length)

    def decode(self, context, cache, ids, positions):
        """One-hot next-token logits for each window entry.

        Args:
          context: static int, the prompt width S.
          cache: `History`.
          ids: int32 [batch, W].
          positions: int32 [batch, W].

        Returns:
          (float32 [batch, W, V] logits: 0 at the proposed token, -inf elsewhere, History).
        """
        cache, columns = history_lib.write_window(cache, ids, positions, context)
        tokens = cache.token_ids                                       # [b, L]
        length = tokens.shape[1]
        j = tf.range(length)                                           # candidate match ends
        # Only columns <= the query column are committed; later ones may be stale drafts.
        proposal = tf.gather(tokens, columns, batch_dims=1)            # fallback: repeat last
        found = tf.zeros_like(columns, dtype=tf.bool)
        for n in range(self.max_ngram, 0, -1):
            match = tf.ones(tf.concat([tf.shape(columns), [length]], 0), tf.bool)  # [b, W, L]
            for i in range(n):
                # Token at candidate column j - i must equal the token at query column - i.
                shifted = tf.roll(tokens, shift=i, axis=1)              # shifted[:, j] = t[j-i]
                query_tok = tf.gather(tokens, tf.maximum(columns - i, 0), batch_dims=1)
                match &= shifted[:, None, :] == query_tok[..., None]
            valid = ((j[None, None, :] < columns[..., None])
                     & (j[None, None, :] - (n - 1) >= cache.prompt_starts[:, None, None])
                     & (columns[..., None] - (n - 1) >= cache.prompt_starts[:, None, None]))
            match &= valid
            # Latest match: the largest j with a match (argmax of j+1 where matched, 0 if none).
            best = tf.reduce_max(tf.where(match, j[None, None, :] + 1, 0), axis=-1)
            hit = (best > 0) & ~found
            follow = tf.gather(tokens, tf.minimum(best, length - 1), batch_dims=1)
            proposal = tf.where(hit, follow, proposal)
            found |= hit
        logits = tf.where(tf.one_hot(proposal, self._vocab_size) > 0, 0.0, -float("inf"))
        return logits, cache
