"""A per-row token history buffer: the "cache" of models that condition on raw tokens.

Layout, for a batch with prompt bucket width S and `max_length` decoder positions:

  columns [0, S)            the prompt, RIGHT-aligned, left-padded with 0
  column  S - 1 + t, t >= 1 the t-th generated token (decoder position t)

Decoder position 0 (the start token) maps onto the last prompt token, so the history is the
plain concatenation prompt ++ generated. Example, S = 4, prompts [5, 6] and [7, 8, 9]:

  row 0: [0, 0, 5, 6 | g1 g2 ...]
  row 1: [0, 7, 8, 9 | g1 g2 ...]

The zero padding doubles as the n-gram convention "context before the start is id 0".
"""

from typing import NamedTuple, Optional

import tensorflow as tf


class History(NamedTuple):
    token_ids: tf.Tensor      # int32 [batch, S + max_length]
    prompt_starts: tf.Tensor  # int32 [batch], first valid column (S - prompt length)


def init_history(prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                 max_length: int) -> History:
    """Builds the buffer from left-aligned prompts.

    Args:
      prompt_ids: int32 [batch, S], left-aligned, padded.
      prompt_lengths: int32 [batch].
      max_length: static int, decoder positions to hold.
    """
    prompt_ids = tf.convert_to_tensor(prompt_ids, tf.int32)
    width = prompt_ids.shape[1]  # Static: prompts are padded to a shape bucket.
    cols = tf.range(width)[None, :]
    shift = width - prompt_lengths[:, None]
    # Column c of the right-aligned prompt is column c - shift of the left-aligned one.
    source = cols - shift
    valid = source >= 0
    right_aligned = tf.where(
        valid, tf.gather(prompt_ids, tf.maximum(source, 0), batch_dims=1), 0)
    batch = tf.shape(prompt_ids)[0]
    tail = tf.zeros([batch, max_length], tf.int32)
    return History(token_ids=tf.concat([right_aligned, tail], axis=1),
                   prompt_starts=width - prompt_lengths)


def write_window(history: History, ids: tf.Tensor, positions: tf.Tensor,
                 prompt_width: int) -> tuple:
    """Writes window tokens at their columns; position 0 (the start token) is not written.

    Args:
      history: the buffer.
      ids: int32 [batch, W].
      positions: int32 [batch, W], decoder positions.
      prompt_width: static int S, the prompt width the buffer was built with.

    Returns:
      (history, columns): the updated buffer and int32 [batch, W] columns of the window.
    """
    columns = prompt_width - 1 + positions
    current = tf.gather(history.token_ids, columns, batch_dims=1)
    # Writing the existing value back at position 0 keeps the prompt's last token intact
    # while every write stays a fixed-width scatter (static shapes under XLA).
    values = tf.where(positions >= 1, ids, current)
    batch = tf.shape(ids)[0]
    rows = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(ids))
    indices = tf.stack([rows, columns], axis=-1)
    token_ids = tf.tensor_scatter_nd_update(history.token_ids, indices, values)
    return history._replace(token_ids=token_ids), columns


class HistoryModel:
    """Base of the models whose cache is a `History` (NGram, PromptLookup).

    Implements the protocol's properties and `prepare`; subclasses implement `decode`, which
    receives the static prompt width S as its context.
    """

    def __init__(self, vocab_size: Optional[int], eos_id: Optional[int], pad_id: int):
        self._vocab_size = vocab_size
        self._eos_id = eos_id
        self._pad_id = pad_id

    @property
    def vocab_size(self) -> Optional[int]:
        return self._vocab_size

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
        """Returns (context = static prompt width S, cache = History)."""
        return (int(prompt_ids.shape[1]), init_history(prompt_ids, prompt_lengths, max_length))
