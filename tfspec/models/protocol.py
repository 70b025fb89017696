"""The small protocol every decodable model implements; the decoding loop sees nothing else.

A model is used in two calls:

    context, cache = model.prepare(prompt_ids, prompt_lengths, max_length)
    logits, cache = model.decode(context, cache, ids, positions)

Positions index the *decoder stream* of one row: position 0 holds the decoder start token
(T5: the pad id), position t >= 1 holds the t-th generated token. `decode` returns, for every
window entry at position t, the logits of the token at position t + 1.

Cache invariant (what makes per-row rollback free): a query at position p attends only to
cache slots j <= p. The loop guarantees that when a window starting at position p0 is decoded,
slots j < p0 hold the committed tokens of that row; slots beyond a row's committed length may
hold stale entries of rejected drafts, which are never attended to and are overwritten later.
"""

from typing import Any, Optional, Protocol, Tuple

import tensorflow as tf

Nest = Any  # a tf.nest structure of tensors


class DecodeModel(Protocol):
    """What `tfspec.generate` needs from a target or a draft."""

    @property
    def vocab_size(self) -> int:
        """Size of the output distribution V."""

    @property
    def eos_id(self) -> Optional[int]:
        """Default end-of-sequence id, or None when the model has none."""

    @property
    def pad_id(self) -> int:
        """Id written after a row ends; also the T5 decoder start id."""

    @property
    def max_prompt_length(self) -> Optional[int]:
        """Longest prompt the model accepts, or None for no limit."""

    def prepare(self, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                max_length: int) -> Tuple[Nest, Nest]:
        """Runs the once-per-request work.

        Args:
          prompt_ids: int32 [batch, prompt_len], left-aligned, padded with `pad_id`.
          prompt_lengths: int32 [batch], number of valid prompt tokens per row (>= 1).
          max_length: static int, number of decoder positions the cache must hold.

        Returns:
          (context, cache): `context` is constant for the request (e.g. cross-attention K/V) and
          is captured by the loop; `cache` is carried through the loop.
        """

    def decode(self, context: Nest, cache: Nest, ids: tf.Tensor,
               positions: tf.Tensor) -> Tuple[tf.Tensor, Nest]:
        """Decodes a window of tokens at per-row positions.

        Args:
          context: from `prepare`.
          cache: from `prepare` or a previous `decode`.
          ids: int32 [batch, window], the tokens at `positions`.
          positions: int32 [batch, window], consecutive per row, in [0, max_length).

        Returns:
          logits: float32 [batch, window, V]; entry w is the next-token logits after ids[:, w].
          cache: updated with the window's entries.
        """
