"""`T5`: a T5 encoder-decoder in Keras/TensorFlow with per-row KV caches.

Two ways to run it:

- `forward(encoder_ids, encoder_lengths, decoder_input_ids)`: uncached, causal, differentiable
  (training, and the reference the cached path is tested against).
- `prepare(prompt_ids, prompt_lengths, max_length)` then `decode(context, cache, ids,
  positions)` any number of times: the `DecodeModel` protocol (`tfspec/models/protocol.py`)
  that the speculative decoding loop drives inside one `tf.function(jit_compile=True)`.

Worked example of the per-row cache (B=2 rows, max_length=8, window W=3). Row 0 has
committed positions 0..1; row 1 has committed 0..3, and slot 4 still holds "x", the key of a
draft that was rejected. `decode(..., positions=[[2, 3, 4], [4, 5, 6]])` writes:

    row 0 K cache:  [k0 k1 .  .  .  .  .  . ]  ->  [k0 k1 k2 k3 k4 .  .  . ]
    row 1 K cache:  [k0 k1 k2 k3 x  .  .  . ]  ->  [k0 k1 k2 k3 k4 k5 k6 . ]

A query at position p attends to slots j <= p only (row 0's query at 3 sees k0..k3, not k4
written by the same call). So whatever lies past a row's position (stale drafts, unwritten
zeros) never affects its logits: rolling back a rejected draft costs nothing, the loop simply
decodes from the shorter position again and the stale slot is overwritten.

Precision: variables and matmuls are in `dtype` (float32 or bfloat16); RMS norms, attention
softmax, the residual stream and the output logits are float32.
"""

import weakref
from typing import Dict, NamedTuple, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf
# XLA's dynamic_update_slice as a TensorFlow op (no tf.* API exposes it); it runs only in
# XLA programs, which `_write_key_columns` checks.
from tensorflow.compiler.tf2xla.python import xla as tf2xla

from tfspec import kernels
from tfspec.models import target_binding
from tfspec.models.t5_config import T5Config
from tfspec.models.t5_layers import (RMSNorm, T5Block, attend, attend_with_masked_bias,
                                     mask_into_bias, normal_initializer)

_SUPPORTED_DTYPES = ("float32", "bfloat16")


# Batches up to this size write a transposed key cache by one slice per row (see below).
_SLICED_ROWS = 16


def _write_key_columns(keys_transposed: tf.Tensor, keys: tf.Tensor,
                       write_indices: tf.Tensor) -> tf.Tensor:
    """Writes a window's keys into a transposed key cache.

    Args:
      keys_transposed: [B, H, d_kv, L], column j the key of position j.
      keys: [B, H, W, d_kv], the window's keys.
      write_indices: int32 [B, H, W, 3] (row, head, position), as for the other layout;
        a row's W positions are consecutive (what `decode` takes).

    Returns:
      [B, H, d_kv, L] with the columns at the window's positions replaced.

    The updated dimension is the minor one, so a row's window is a [H, d_kv, W] block of
    consecutive columns, not a set of leading-dimension rows a scatter could take whole.
    In an XLA program (the decode loop) with a static batch of up to `_SLICED_ROWS` rows,
    each row's block is one dynamic_update_slice of the loop-carried buffer, in place.
    Otherwise (eager, plain graphs, where that op does not run, and larger batches, whose
    one op per row would make the program grow with the batch: 256-row test batches took
    minutes and GBs to compile) one scatter names every scalar (at batch 1 in the embedded
    target's verify: 6-7 us per layer against 4-5 us for the slice). The two differ only
    past the end: dynamic_update_slice would clamp a block running past L onto earlier
    columns, the scatter drops it; windows fit in the loop (`WindowedCache` in
    protocol.py).
    """
    block = tf.transpose(keys, [0, 1, 3, 2])  # [B, H, d_kv, W]
    batch = keys.shape[0]
    if batch is not None and batch <= _SLICED_ROWS and kernels.in_xla_program():
        starts = write_indices[:, 0, 0, 2]  # [B]: each row's first position
        zero = tf.zeros([], starts.dtype)
        for b in range(batch):
            keys_transposed = tf2xla.dynamic_update_slice(
                keys_transposed, block[b:b + 1],
                tf.stack([tf.constant(b, starts.dtype), zero, zero, starts[b]]))
        return keys_transposed
    grid = tf.shape(block)  # [B, H, d_kv, W]

    def spread(per_entry):  # [B, H, W] -> [B, H, d_kv, W]
        return tf.broadcast_to(per_entry[:, :, None, :], grid)

    # [B, H, d_kv, W, 4]: (row, head, d, position) of every scalar of `block`.
    indices = tf.stack([
        spread(write_indices[..., 0]), spread(write_indices[..., 1]),
        tf.broadcast_to(tf.range(grid[2], dtype=write_indices.dtype)[None, None, :, None],
                        grid),
        spread(write_indices[..., 2])], axis=-1)
    return tf.tensor_scatter_nd_update(keys_transposed, indices, block)


def _amx_product(x: tf.Tensor, kernel_panels: tf.Tensor, columns: int,
                 lengths: Optional[tf.Tensor] = None) -> tf.Tensor:
    """float32 [B, S, K] (static shape) @ the kernel of AMX panels -> float32 [B, S, N];
    with `lengths` (int32 [B]) the positions past each row's length are 0 and mostly not
    multiplied (`kernels.amx_matmul`)."""
    return kernels.amx_matmul(x, kernel_panels, x.shape[-1], columns, lengths)


def _kernel_applies(x: tf.Tensor) -> bool:
    """Whether a [B, W, ...] decode input goes through `kernels.matmul`: a static
    B * W <= `kernels.MAX_ROWS`, in a program where the kernel can run. The second check is
    made here, not only when the context was prepared: a context prepared in an XLA program
    (with panels) may be decoded outside one (eagerly, in a plain graph), where the custom
    call has no kernel."""
    batch, width = x.shape[0], x.shape[1]
    return (batch is not None and width is not None and batch * width <= kernels.MAX_ROWS
            and kernels.enabled())


class T5Context(NamedTuple):
    """What `prepare` computes once per request; captured (not carried) by the decode loop.

    Everything here is in the layout the decode step reads, so that no decode step
    re-lays out a loop invariant (XLA does not hoist such transposes out of a while loop).

    Attributes:
      cross_keys: tuple over decoder layers of [B, H, S, d_kv] (compute dtype, head-major).
      cross_values: tuple over decoder layers of [B, H, S, d_kv] (compute dtype, head-major).
      encoder_mask: bool [B, S], True at valid prompt tokens.
      lm_head: float32 [D, V], the output projection (tied models: `shared` transposed;
        bfloat16 models: cast once here rather than on every decode call). Stored [D, V]
        so the one-row decode step is XLA:CPU's fast vector-matrix dot; `shared` [V, D]
        contracted on its minor dimension was emitted as a slow loop fusion.
    """

    cross_keys: Tuple[tf.Tensor, ...]
    cross_values: Tuple[tf.Tensor, ...]
    encoder_mask: tf.Tensor
    lm_head: Optional[tf.Tensor] = None
    # Tuple over decoder layers of [B, H, d_kv, S]: `cross_keys` transposed once per request,
    # read by windows of several positions (the verify). Their score dot [W, d_kv] x
    # [d_kv, S] then contracts the major dimension of the keys, which XLA:CPU emits
    # 2.7-5x faster than the [W, d_kv] x [S, d_kv]^T form for W > 1 (at S = 384, W = 5:
    # 17 against 47 us in a loop, 25 against 104-191 us inside the real verify). A
    # one-position step keeps `cross_keys`: its vector-matrix form is the faster one.
    cross_keys_transposed: Optional[Tuple[tf.Tensor, ...]] = None
    panels: Optional[Tuple["T5LayerPanels", ...]] = None
    lm_head_panels: Optional[tf.Tensor] = None
    # [B, S, D] compute dtype, the encoder output: read only by feature drafts, which
    # project their own cross-attention K/V from it (XLA drops it from other programs).
    encoder_states: Optional[tf.Tensor] = None


class T5EncoderPanels(NamedTuple):
    """One encoder layer's kernels as AMX panels (`tfspec.kernels.amx_panels`), each None
    where the machine has no AMX or the weights are not bfloat16-exact (XLA's product then).

    An encoder multiplies batch x prompt-bucket rows by every weight once per request:
    compute-bound work that XLA:CPU runs at ~130-200 GFLOP/s here, and AMX's bfloat16
    tiles faster (`tfspec.kernels.amx_matmul`: exact split of the float32 activations, so
    the products stay float32 dot products).
    """

    self_qkv: Optional[tf.Tensor]  # q | k | v: K = D, N = 3 * H * d_kv
    self_out: Optional[tf.Tensor]  # o: K = H * d_kv, N = D
    ffn_in: Optional[tf.Tensor]    # wi_0 | wi_1 (gated) or wi: K = D, N = 2 * d_ff or d_ff
    ffn_out: Optional[tf.Tensor]   # wo: K = d_ff, N = D


class T5LayerPanels(NamedTuple):
    """One decoder layer's kernels in the `tfspec.kernels` panel layout (float32
    [N / 16, K, 16] each), made once per request by `prepare` on CPU.

    Few-row decode calls (autoregressive and draft steps, the k + 1-row verify) multiply
    through these with the `tfspec.kernels.matmul` custom call instead of XLA's dot: one
    pass over the weights for all rows (see `tfspec/kernels/__init__.py` for the why).
    Products that share an input are side by side in one matrix, so a step makes four
    calls per layer instead of eight.
    """

    self_qkv: tf.Tensor     # q | k | v: K = D, N = 3 * H * d_kv
    self_out: tf.Tensor     # o: K = H * d_kv, N = D
    cross_query: tf.Tensor  # q: K = D, N = H * d_kv
    cross_out: tf.Tensor    # o: K = H * d_kv, N = D
    ffn_in: tf.Tensor       # wi_0 | wi_1 (gated) or wi: K = D, N = 2 * d_ff or d_ff
    ffn_out: tf.Tensor      # wo: K = d_ff, N = D


class _TargetEncoderAdapter:
    """A draft's target-encoder adapter (`T5.attach_target_encoder`), held outside Keras'
    attribute tracking: its projection is not one of the checkpoint's HF tensors, so it must
    not join `weights` (saved by `save_model` in a file of its own)."""

    def __init__(self, projection: keras.Variable, target_fingerprint: str, target_name: str):
        self.projection = projection                  # float32 [D_target, D]
        self.target_fingerprint = target_fingerprint
        self.target_name = target_name


class T5Cache(NamedTuple):
    """Decoder self-attention KV cache, carried through the decode loop.

    Attributes:
      keys: tuple over decoder layers of [B, H, max_length, d_kv] (compute dtype); slot j
        holds the key of decoder position j of that row. Head-major so that attention reads
        the cache in place (see `t5_layers.attend`); a decode step writes only its window.
        Empty when `keys_transposed` holds the keys.
      values: tuple over decoder layers of [B, H, max_length, d_kv], like `keys`.
      keys_transposed: tuple over decoder layers of [B, H, d_kv, max_length]: column j is
        the key of position j. The layout of a cache prepared for windows of several
        positions (`prepare(..., window=W)`, the speculative target's verify), whose score
        dot [W, d_kv] x [d_kv, L] XLA:CPU then runs without transposing the keys (see
        `WindowedCache` in protocol.py); empty otherwise.
    """

    keys: Tuple[tf.Tensor, ...]
    values: Tuple[tf.Tensor, ...]
    keys_transposed: Tuple[tf.Tensor, ...] = ()


class T5(keras.Model):
    """T5 (v1.0 / v1.1 / FLAN layouts) with the `DecodeModel` protocol.

    Args:
      config: a `T5Config`.
      seed: seed of the random initialisation (HF's initialisation scheme).
      dtype: "float32" or "bfloat16": dtype of the variables and matmuls.
      initialize: "random" (default) or "zeros" (skip the random draw when a checkpoint will
        overwrite every weight; used by `tfspec.load_model`).
    """

    def __init__(self, config: T5Config, seed: int = 0, dtype: str = "float32", *,
                 initialize: str = "random", name: str = "t5"):
        dtype = tf.as_dtype(dtype).name
        if dtype not in _SUPPORTED_DTYPES:
            raise ValueError(f"T5 dtype must be one of {_SUPPORTED_DTYPES}, got {dtype!r}.")
        if initialize not in ("random", "zeros"):
            raise ValueError(f"initialize must be 'random' or 'zeros', got {initialize!r}.")
        super().__init__(name=name, dtype=dtype)
        self._config = config
        self._dtype_name = dtype
        self.seed = seed
        # Path of the SentencePiece model this checkpoint came with (set by load_model);
        # save_model copies it next to the weights.
        self.tokenizer_path: Optional[str] = None
        self._max_prompt_length: Optional[int] = None
        # Draft vocabulary (`set_draft_vocabulary`): None, or int32 [N] sorted token ids
        # whose logits `decode` returns (a draft's q is 0 outside them).
        self._draft_vocabulary: Optional[np.ndarray] = None
        # Target-encoder adapter (`attach_target_encoder`), or None: its own encoder.
        self._target_encoder: Optional[_TargetEncoderAdapter] = None
        rng = np.random.default_rng(seed) if initialize == "random" else None

        def init(stddev):
            return "zeros" if rng is None else normal_initializer(rng, stddev)

        # HF initialises the shared embedding and an untied lm_head with stddev 1.0.
        self.shared = self.add_weight(name="shared", shape=(config.vocab_size, config.d_model),
                                      initializer=init(1.0))
        self.encoder_blocks = [
            T5Block(config, is_decoder=False, has_relative_bias=(i == 0), rng=rng,
                    dtype=self.dtype_policy, name=f"encoder_block_{i}")
            for i in range(config.num_layers)]
        self.encoder_final_norm = RMSNorm(config.d_model, config.layer_norm_epsilon,
                                          dtype=self.dtype_policy, name="encoder_final_norm")
        self.decoder_blocks = [
            T5Block(config, is_decoder=True, has_relative_bias=(i == 0), rng=rng,
                    dtype=self.dtype_policy, name=f"decoder_block_{i}")
            for i in range(config.num_decoder_layers)]
        self.decoder_final_norm = RMSNorm(config.d_model, config.layer_norm_epsilon,
                                          dtype=self.dtype_policy, name="decoder_final_norm")
        self.lm_head = None
        if not config.tie_word_embeddings:
            # Stored [D, V] (Keras [in, out]); HF `lm_head.weight` is [V, D].
            self.lm_head = self.add_weight(name="lm_head",
                                           shape=(config.d_model, config.vocab_size),
                                           initializer=init(1.0))

    # ------------------------------------------------------------------- protocol properties

    @property
    def config(self) -> T5Config:
        """The `T5Config` of this model."""
        return self._config

    @property
    def vocab_size(self) -> int:
        """Size V of the output distribution."""
        return self._config.vocab_size

    @property
    def eos_id(self) -> Optional[int]:
        """End-of-sequence id (`config.eos_token_id`, 1 for every public T5)."""
        return self._config.eos_token_id

    @property
    def pad_id(self) -> int:
        """Pad id, also the decoder start id of public T5 checkpoints (0)."""
        return self._config.pad_token_id

    @property
    def decoder_start_id(self) -> int:
        """Id fed at decoder position 0 (`config.decoder_start_token_id`)."""
        return self._config.decoder_start_token_id

    @property
    def max_prompt_length(self) -> Optional[int]:
        """None: relative position buckets saturate, so T5 accepts prompts of any length.

        Settable, e.g. to the length a model was trained on.
        """
        return self._max_prompt_length

    @max_prompt_length.setter
    def max_prompt_length(self, value: Optional[int]):
        self._max_prompt_length = None if value is None else int(value)

    @property
    def model_dtype(self) -> str:
        """"float32" or "bfloat16"."""
        return self._dtype_name

    @property
    def draft_vocab_ids(self) -> Optional[np.ndarray]:
        """None, or int32 [N] ascending: the draft vocabulary `decode` returns logits over
        (the `DraftVocabulary` extension of `tfspec/models/protocol.py`)."""
        return self._draft_vocabulary

    def set_draft_vocabulary(self, ids) -> "T5":
        """Restricts this model, as a draft, to a vocabulary of N tokens.

        `decode` then returns logits over `ids` only ([B, W, N]; entry j is token ids[j]),
        so a draft step's LM head and its argmax or sampling work shrink from V to N
        columns. The draft's q is 0 outside `ids`: any q keeps speculative decoding exact
        (the residual max(0, p - q) covers the tokens q misses), so only the acceptance
        rate can change. On the embedded draft the LM head is most of a step
        (`bench.loop_profile`). The uncached `forward` is unaffected. Decoded alone (k = 0,
        how benchmarks time a draft) the model emits only tokens of its draft vocabulary;
        `tfspec.generate` refuses it as the target of speculative decoding.

        Args:
          ids: int token ids in [0, V), distinct; None restores the full vocabulary. The
            end-of-sequence id is always added (a draft vocabulary that could not end a
            sequence would make every final round a rejection).

        Returns:
          self.

        Raises:
          ValueError: ids outside [0, V), repeated, or empty.
        """
        if ids is None:
            vocabulary = None
        else:
            array = np.asarray(ids)
            if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
                raise ValueError("a draft vocabulary is a non-empty list of integer token ids")
            if array.min() < 0 or array.max() >= self.vocab_size:
                raise ValueError(f"draft vocabulary ids must lie in [0, {self.vocab_size})")
            if np.unique(array).size != array.size:
                raise ValueError("draft vocabulary ids must be distinct")
            always = [] if self.eos_id is None else [self.eos_id]
            vocabulary = np.union1d(array, always).astype(np.int32)
            if vocabulary.size == self.vocab_size:
                vocabulary = None
        self._draft_vocabulary = vocabulary
        kernels.drop_panel_cache(self)  # Its LM head panel has the old columns.
        return self

    def decode_projection(self) -> tf.Tensor:
        """float32 [D, N]: the decode path's LM head, restricted to the draft vocabulary
        (N = V without one)."""
        projection = self.output_projection()
        if self._draft_vocabulary is None:
            return projection
        return tf.gather(projection, self._draft_vocabulary, axis=1)

    # ------------------------------------------------------------------------------ helpers

    def _embed(self, ids: tf.Tensor) -> tf.Tensor:
        """int32 [B, T] -> float32 [B, T, D] (the residual stream is kept in float32)."""
        return tf.cast(tf.gather(self.shared, ids), tf.float32)

    def _embed_window(self, ids: tf.Tensor) -> tf.Tensor:
        """`_embed` for a decode window: int32 [B, W] -> float32 [B, W, D].

        One gather per window entry while B is 1: XLA:CPU splits a gather of several rows
        of the [V, D] table over its thread pool (its cost model counts the whole table),
        and waking the pool's threads for the 5 rows of a verify cost 10-50 us inside the
        loop (`bench.loop_profile`); a one-row gather runs inline.
        """
        if ids.shape[0] != 1 or ids.shape[1] is None or ids.shape[1] == 1:
            return self._embed(ids)
        return tf.concat([self._embed(ids[:, j:j + 1]) for j in range(ids.shape[1])], 1)

    def _encoder_bias(self, length: tf.Tensor) -> tf.Tensor:
        """float32 [1, H, S, S] bidirectional bias; prompts are left-aligned, so position =
        index and the bias is the same for every row."""
        positions = tf.range(length)
        relative = positions[None, :] - positions[:, None]  # [S(query), S(key)] = key - query
        bias = self.encoder_blocks[0].self_attention.position_bias(
            relative, bidirectional=True,
            max_distance=self._config.relative_attention_max_distance)
        return bias[None]

    def _encoder_offset_bias(self, width: int) -> tf.Tensor:
        """float32 [H, 2S - 1]: the bidirectional bias of key - query offset o at o + S - 1
        (S = `width`), what `kernels.prompt_attention` reads instead of `_encoder_bias`'s
        [1, H, S, S]."""
        offsets = tf.range(1 - width, width)[None, :]  # [1, 2S - 1]
        bias = self.encoder_blocks[0].self_attention.position_bias(
            offsets, bidirectional=True,
            max_distance=self._config.relative_attention_max_distance)  # [H, 1, 2S - 1]
        return bias[:, 0, :]

    def _prompt_attention_applies(self, encoder_ids: tf.Tensor) -> bool:
        """Whether a compiled decode program's encoder runs its self-attention through
        `kernels.prompt_attention`: a static [B, S], a float32 model, in a program where the
        kernel can run."""
        return (encoder_ids.shape.is_fully_defined() and self.compute_dtype == "float32"
                and kernels.enabled() and kernels.prompt_attention_available())

    def _decoder_bias(self, query_positions: tf.Tensor, key_length) -> tf.Tensor:
        """Per-row unidirectional bias and causal-by-position mask.

        Args:
          query_positions: int32 [B, W] decoder positions of the queries.
          key_length: number of key slots L (slot j holds decoder position j).

        Returns:
          (bias float32 [B, H, W, L], mask bool [B, 1, W, L] True where slot j <= position).
        """
        slots = tf.range(key_length)
        relative = slots[None, None, :] - query_positions[:, :, None]  # [B, W, L]
        bias = self.decoder_blocks[0].self_attention.position_bias(
            relative, bidirectional=False,
            max_distance=self._config.relative_attention_max_distance)
        # The invariant that makes rollback free: a query never sees a slot past its own
        # position, so stale entries of rejected drafts beyond a row's length are inert.
        mask = (relative <= 0)[:, None]
        return bias, mask

    def _decoder_layers(self, x: tf.Tensor, bias: tf.Tensor, self_mask: tf.Tensor,
                        context: T5Context, cache: Optional[T5Cache] = None,
                        write_indices: Optional[tf.Tensor] = None,
                        collect: Tuple[int, ...] = (), live_width=None):
        """Runs the decoder blocks on a window.

        Args:
          x: float32 [B, W, D] embedded window (residual stream).
          bias: float32 [B|1, H, W, L] self-attention bias (first layer's table, shared).
          self_mask: bool [B|1, 1, W, L].
          context: cross-attention keys/values and encoder mask.
          cache: None for the uncached path (keys are the window itself, L = W); else the KV
            cache with L = max_length slots.
          write_indices: int32 [B, H, W, 3] (row, head, position) triples where the window's
            keys and values go, required with `cache`.
          collect: indices of the blocks whose output residual streams are also returned.
          live_width: int32 [B] or [] or None, see `decode`.

        Returns:
          (x float32 [B, W, D] before the final norm, updated T5Cache or None, tuple of the
          collected blocks' outputs float32 [B, W, D] in the order of `collect`).
        """
        compute = self.compute_dtype
        cross_mask = context.encoder_mask[:, None, None, :]  # [B, 1, 1, S]
        panels = context.panels if context.panels is not None and _kernel_applies(x) else None
        config = self._config
        d_model, inner = config.d_model, config.num_heads * config.d_kv
        ffn_width = 2 * config.d_ff if config.is_gated_act else config.d_ff
        new_keys, new_values, outputs = [], [], {}

        def product(h, layer_panels, columns):
            return kernels.matmul(h, layer_panels, columns, live_width)

        # With the panels (a decode call in an XLA program on CPU), attention over keys laid
        # out [d_kv, L] (a cache prepared for windows, the transposed cross keys) goes
        # through `kernels.batched_matmul` too: XLA's batched GEMM for a 5-row verify cost
        # ~4x its one-row GEMV (t5-base, bench.loop_profile: 2.0 against 0.54 ms for a
        # round's 48 attention dots). A one-position step over an autoregressive cache
        # keeps XLA's GEMV over keys [L, d_kv]: with that cache laid out for the kernel, the
        # compiled loop copied every layer's key cache on every step (bench.loop_profile:
        # 0.25 ms per t5-base step), more than the kernel saved.
        kernel_attention = panels is not None and compute == tf.float32
        # A window of several positions reads the transposed cross keys (see T5Context).
        wide = (context.cross_keys_transposed is not None and x.shape[1] is not None
                and x.shape[1] > 1)

        for i, block in enumerate(self.decoder_blocks):
            h = block.self_attention_norm.normalize(x, compute)
            if panels is not None:
                attention = block.self_attention
                query, keys, values = (attention.split_heads(y) for y in tf.split(
                    product(h, panels[i].self_qkv, 3 * inner), 3, axis=-1))
            else:
                query = block.self_attention.query(h)
                keys, values = block.self_attention.keys_values(h)
            transposed = cache is not None and bool(cache.keys_transposed)
            if cache is not None:
                # Per-row write of the window at its positions: values [B, H, W, d_kv] go to
                # slots (row, head, position). A scatter, not a dynamic_update_slice: rows
                # sit at different positions, and one scatter is a single fixed-shape XLA
                # op that updates the loop-carried cache buffer in place (its old value
                # has no other reader). Positions in a row are distinct, so no two
                # updates hit the same slot.
                values = tf.tensor_scatter_nd_update(cache.values[i], write_indices, values)
                if transposed:
                    keys = _write_key_columns(cache.keys_transposed[i], keys, write_indices)
                else:
                    keys = tf.tensor_scatter_nd_update(cache.keys[i], write_indices, keys)
                new_keys.append(keys)
                new_values.append(values)
            heads = attend(query, keys, values, bias, self_mask, keys_transposed=transposed,
                           kernel_products=kernel_attention and transposed)
            if panels is not None:
                x = x + product(block.self_attention.merge_heads(heads), panels[i].self_out,
                                d_model)
            else:
                x = x + tf.cast(block.self_attention.project_output(heads), tf.float32)

            h = block.cross_attention_norm.normalize(x, compute)
            if panels is not None:
                query = block.cross_attention.split_heads(
                    product(h, panels[i].cross_query, inner))
            else:
                query = block.cross_attention.query(h)
            keys = context.cross_keys_transposed[i] if wide else context.cross_keys[i]
            heads = attend(query, keys, context.cross_values[i], None, cross_mask,
                           keys_transposed=wide, kernel_products=kernel_attention and wide)
            if panels is not None:
                x = x + product(block.cross_attention.merge_heads(heads), panels[i].cross_out,
                                d_model)
            else:
                x = x + tf.cast(block.cross_attention.project_output(heads), tf.float32)

            h = block.ffn_norm.normalize(x, compute)
            if panels is not None:
                hidden = block.ffn.hidden(product(h, panels[i].ffn_in, ffn_width))
                x = x + product(hidden, panels[i].ffn_out, d_model)
            else:
                x = x + tf.cast(block.ffn.transform(h), tf.float32)
            outputs[i] = x
        if cache is None:
            new_cache = None
        elif cache.keys_transposed:
            new_cache = T5Cache((), tuple(new_values), keys_transposed=tuple(new_keys))
        else:
            new_cache = T5Cache(tuple(new_keys), tuple(new_values))
        return x, new_cache, tuple(outputs[i] for i in collect)

    def _final_decoder_states(self, x: tf.Tensor) -> tf.Tensor:
        """float32 [B, T, D] -> float32 [B, T, D] after the final norm (HF last_hidden_state)."""
        return self.decoder_final_norm.normalize(x, tf.float32)

    def output_projection(self) -> tf.Tensor:
        """float32 [D, V]: the LM head (tied models: `shared` transposed)."""
        if self.lm_head is None:
            return tf.transpose(tf.cast(self.shared, tf.float32))
        return tf.cast(self.lm_head, tf.float32)

    def logits_from_states(self, states: tf.Tensor,
                           lm_head: Optional[tf.Tensor] = None) -> tf.Tensor:
        """LM head: float32 [B, T, D] final decoder states -> float32 [B, T, V] logits.

        v1.0 (tied): `(states * d_model**-0.5) @ shared.T`; v1.1/FLAN: `states @ lm_head`.
        The matmul runs in float32 whatever the model dtype.

        Args:
          states: float32 [B, T, D].
          lm_head: float32 [D, V] from `output_projection` (the decode path passes the copy
            its context holds); None reads the variables (differentiable training path).
        """
        if self._config.rescales_decoder_output:
            states = states * (self._config.d_model ** -0.5)
        if lm_head is not None:
            return tf.einsum("btd,dv->btv", states, lm_head)
        if self.lm_head is None:
            return tf.einsum("btd,vd->btv", states, tf.cast(self.shared, tf.float32))
        return tf.einsum("btd,dv->btv", states, tf.cast(self.lm_head, tf.float32))

    # ------------------------------------------------------------------------------ encoder

    def encode(self, encoder_ids: tf.Tensor,
               encoder_lengths: Optional[tf.Tensor] = None,
               for_decode: bool = False) -> Tuple[tf.Tensor, tf.Tensor]:
        """Runs the encoder.

        Args:
          encoder_ids: int32 [B, S], left-aligned, padded.
          encoder_lengths: int32 [B] valid tokens per row (>= 1); None means all S.
          for_decode: the encoder of a compiled decode program (`prepare`): its products
            run on AMX where this model has AMX panels (`T5EncoderPanels`), and its
            self-attention through `kernels.prompt_attention` where that can run (AVX-512).
            Never for training: the custom calls have no gradient.

        Returns:
          (states [B, S, D] in the compute dtype after the final norm (padded positions hold
          unused values: with the kernels that skip the padding, 0 before the norm),
          encoder_mask bool [B, S]).
        """
        encoder_ids = tf.convert_to_tensor(encoder_ids, tf.int32)
        length = tf.shape(encoder_ids)[1]
        if encoder_lengths is None:
            encoder_mask = tf.ones_like(encoder_ids, tf.bool)
        else:
            encoder_mask = tf.sequence_mask(tf.cast(encoder_lengths, tf.int32), length)
        compute = self.compute_dtype
        fused = for_decode and self._prompt_attention_applies(encoder_ids)
        layer_panels = (self._amx_panels()[0]
                        if for_decode and kernels.amx_applies(encoder_ids) else None)
        valid = None
        if fused or layer_panels is not None:
            # int32 [B]: each row's valid positions, for the kernels that skip the padding
            # (padded states are unused; those kernels write them as 0).
            valid = (tf.cast(encoder_lengths, tf.int32) if encoder_lengths is not None
                     else tf.fill([tf.shape(encoder_ids)[0]], length))
        if fused:
            # [H, 2S - 1]: the bias of every key - query offset; padded keys are the
            # kernel's to skip (`kernels.prompt_attention`).
            offset_bias = self._encoder_offset_bias(int(encoder_ids.shape[1]))
        else:
            # [B, H, S, S]: the relative position bias, and the score of padded keys.
            masked_bias = mask_into_bias(self._encoder_bias(length),
                                         encoder_mask[:, None, None, :])
        x = self._embed(encoder_ids)
        for i, block in enumerate(self.encoder_blocks):
            amx = layer_panels[i] if layer_panels is not None else T5EncoderPanels(
                None, None, None, None)
            attention, ffn = block.self_attention, block.ffn
            heads_width = attention.num_heads * attention.d_kv
            h = block.self_attention_norm.normalize(x, compute)
            if amx.self_qkv is not None:
                qkv = _amx_product(h, amx.self_qkv, 3 * heads_width, valid)
            elif fused:
                qkv = attention.project_qkv(h)
            if fused:  # heads merged, [B, S, H * d_kv]
                merged = kernels.prompt_attention(qkv, offset_bias, valid, attention.num_heads,
                                                  attention.d_kv)
            else:
                if amx.self_qkv is not None:
                    query, keys, values = (attention.split_heads(y)
                                           for y in tf.split(qkv, 3, axis=-1))
                else:
                    query = attention.query(h)
                    keys, values = attention.keys_values(h)
                merged = attention.merge_heads(
                    attend_with_masked_bias(query, keys, values, masked_bias))
            if amx.self_out is not None:
                x = x + _amx_product(merged, amx.self_out, self._config.d_model, valid)
            else:
                x = x + tf.cast(attention.project_merged(merged), tf.float32)
            h = block.ffn_norm.normalize(x, compute)
            if amx.ffn_in is not None and amx.ffn_out is not None:
                hidden = ffn.hidden(_amx_product(h, amx.ffn_in, ffn.input_kernel_width, valid))
                x = x + _amx_product(hidden, amx.ffn_out, self._config.d_model, valid)
            else:
                x = x + tf.cast(ffn.transform(h), tf.float32)
        return self.encoder_final_norm.normalize(x, compute), encoder_mask

    def _context(self, encoder_states: tf.Tensor, encoder_mask: tf.Tensor,
                 for_decode: bool = False) -> T5Context:
        """Cross-attention K/V; with `for_decode`, also the decode step's weight layouts
        (the float32 LM head [D, V], and on CPU the kernel panels of `T5LayerPanels`).

        XLA drops whichever of them no call of the compiled program reads.
        """
        cross_panels = (self._amx_panels()[1]
                        if for_decode and kernels.amx_applies(encoder_states)
                        else (None,) * len(self.decoder_blocks))
        valid = (tf.reduce_sum(tf.cast(encoder_mask, tf.int32), axis=1)  # [B], left-aligned
                 if any(panels is not None for panels in cross_panels) else None)
        pairs = []
        for block, panels in zip(self.decoder_blocks, cross_panels):
            cross = block.cross_attention
            if panels is None:
                pairs.append(cross.keys_values(encoder_states))
            else:  # k | v side by side: one AMX product per layer.
                pairs.append(cross.keys_values_on_amx(encoder_states, panels, valid))
        context = T5Context(tuple(k for k, _ in pairs), tuple(v for _, v in pairs),
                            encoder_mask, encoder_states=encoder_states)
        if not for_decode:
            return context
        context = context._replace(
            lm_head=self.decode_projection(),
            cross_keys_transposed=tuple(tf.transpose(k, [0, 1, 3, 2])
                                        for k in context.cross_keys))
        cache = kernels.readable_panel_cache(self)
        if cache is None:
            return context
        per_layer = len(T5LayerPanels._fields)
        values = [tf.convert_to_tensor(v) for v in cache.variables(range(self._decode_entries))]
        layers = tuple(T5LayerPanels(*values[i * per_layer:(i + 1) * per_layer])
                       for i in range(len(self.decoder_blocks)))
        return context._replace(panels=layers, lm_head_panels=values[-1])

    def refresh_decode_panels(self) -> bool:
        """Makes (or re-makes, if the weights changed) the `T5LayerPanels` of every decoder
        layer and the LM head's, which decode calls traced afterwards read on CPU.

        `tfspec.generate` calls this before a model's first compiled call (eager; a
        fingerprint of the weights, ~1-2 ms for the embedded target, decides whether anything
        is re-packed); later calls check the panels inside the compiled loop
        (`kernels.PanelCache.current`) and call this only when they changed.
        Returns whether panels are in use for this model here.
        """
        if not (self._panels_apply() and kernels.usable_outside_trace()):
            return False
        cache = kernels.panel_cache(self, self._make_panel_cache)
        cache.refresh()
        return True

    def _make_panel_cache(self) -> "kernels.PanelCache":
        sources, variables = [], []

        def add(fn, *source_variables):
            sources.append(fn)
            variables.append(source_variables)

        def add_self_attention(attention):  # q | k | v side by side, then o
            add(lambda: tf.concat([attention.q, attention.k, attention.v], axis=1),
                attention.q, attention.k, attention.v)
            add(lambda: tf.convert_to_tensor(attention.o), attention.o)

        def add_ffn(ffn):  # wi_0 | wi_1 (or wi), then wo
            if ffn.gated:
                add(ffn.input_kernel, ffn.wi_0, ffn.wi_1)
            else:
                add(ffn.input_kernel, ffn.wi)
            add(lambda: tf.convert_to_tensor(ffn.wo), ffn.wo)

        for block in self.decoder_blocks:  # In the order of `T5LayerPanels`' fields.
            cross = block.cross_attention
            add_self_attention(block.self_attention)
            add(lambda c=cross: tf.convert_to_tensor(c.q), cross.q)
            add(lambda c=cross: tf.convert_to_tensor(c.o), cross.o)
            add_ffn(block.ffn)
        # The cache is the value of a weak-keyed table whose key is this model: a bound
        # method here would keep the model (and all its panels) alive forever.
        model = weakref.ref(self)
        add(lambda: model().decode_projection(),
            self.shared if self.lm_head is None else self.lm_head)
        kinds = [kernels.ROWS] * len(sources)
        if kernels.amx_available():
            # After the decode entries (`_decode_entries`): the encoder's products and the
            # cross-attention keys | values, once per request (`_amx_panels`).
            for block in self.encoder_blocks:  # In the order of `T5EncoderPanels`' fields.
                add_self_attention(block.self_attention)
                add_ffn(block.ffn)
            for block in self.decoder_blocks:
                cross = block.cross_attention
                add(lambda c=cross: tf.concat([c.k, c.v], axis=1), cross.k, cross.v)
            adapter = self._target_encoder
            if adapter is not None:
                # Last: the target-encoder projection's three bfloat16 parts (a fitted
                # float32 matrix, not a bfloat16 value), `_projection_entry`.
                add(lambda a=adapter: kernels.bfloat16_split(a.projection), adapter.projection)
            kinds += [kernels.AMX] * (len(sources) - len(kinds))
        return kernels.PanelCache(sources, variables, kinds)

    @property
    def _decode_entries(self) -> int:
        """How many entries of the panel cache are the decode step's (`T5LayerPanels` of
        every decoder layer, then the LM head); AMX entries follow them."""
        return len(self.decoder_blocks) * len(T5LayerPanels._fields) + 1

    def _amx_panels(self) -> Tuple[Optional[Tuple[T5EncoderPanels, ...]], tuple]:
        """(`T5EncoderPanels` per encoder layer or None, the cross-attention k | v AMX panels
        per decoder layer (None where absent)) for the program being traced: None / Nones
        unless this model's panel cache is readable here and has AMX entries."""
        none = (None,) * len(self.decoder_blocks)
        cache = kernels.readable_panel_cache(self)
        if cache is None or len(cache) == self._decode_entries:
            return None, none
        start, per_layer = self._decode_entries, len(T5EncoderPanels._fields)
        encoder_entries = range(start, start + per_layer * len(self.encoder_blocks))
        cross_entries = range(encoder_entries.stop,
                              encoder_entries.stop + len(self.decoder_blocks))
        values = [None if v is None else tf.convert_to_tensor(v)
                  for v in cache.variables(encoder_entries)]
        layers = tuple(T5EncoderPanels(*values[i * per_layer:(i + 1) * per_layer])
                       for i in range(len(self.encoder_blocks)))
        cross = tuple(None if v is None else tf.convert_to_tensor(v)
                      for v in cache.variables(cross_entries))
        return layers, cross

    def _projection_entry(self) -> int:
        """The panel cache entry of the target-encoder projection's
        `kernels.bfloat16_split` (last, after the cross k | v; made where AMX runs and an
        adapter is attached)."""
        return (self._decode_entries + len(T5EncoderPanels._fields) * len(self.encoder_blocks)
                + len(self.decoder_blocks))

    def _panels_apply(self) -> bool:
        """Whether `tfspec.kernels` serves this model's decode products: float32 models (the
        kernel is float32; bfloat16 models keep XLA's products)."""
        return self._dtype_name == "float32"

    # ------------------------------------------------------------------------ uncached path

    def decoder_states(self, encoder_ids: tf.Tensor, encoder_lengths: Optional[tf.Tensor],
                       decoder_input_ids: tf.Tensor) -> tf.Tensor:
        """Uncached final decoder states (HF `decoder_hidden_states[-1]`).

        Args:
          encoder_ids: int32 [B, S]; encoder_lengths: int32 [B] or None.
          decoder_input_ids: int32 [B, T], starting with the decoder start id.

        Returns:
          float32 [B, T, D].
        """
        return self.decoder_features(encoder_ids, encoder_lengths, decoder_input_ids)[0]

    def decoder_features(self, encoder_ids: tf.Tensor, encoder_lengths: Optional[tf.Tensor],
                         decoder_input_ids: tf.Tensor, feature_layers: Tuple[int, ...] = ()
                         ) -> Tuple[tf.Tensor, tf.Tensor, T5Context]:
        """Uncached final decoder states, the features a feature draft reads, and the context.

        Args:
          encoder_ids, encoder_lengths, decoder_input_ids: as in `decoder_states`.
          feature_layers: see `decode_with_features`.

        Returns:
          (states float32 [B, T, D], features float32 [B, T, F] with F = D x
          len(feature_layers), or None when it is empty, the `T5Context` whose
          `encoder_states` and `encoder_mask` a feature draft cross-attends to).
        """
        context = self._context(*self.encode(encoder_ids, encoder_lengths))
        states, collected = self._uncached_decoder(context, decoder_input_ids,
                                                   self._collected(feature_layers))
        return states, self._features(states, collected, feature_layers), context

    def _uncached_decoder(self, context: T5Context, decoder_input_ids: tf.Tensor,
                          collect: Tuple[int, ...] = ()) -> Tuple[tf.Tensor, tuple]:
        """(final decoder states float32 [B, T, D], the `collect`ed block outputs) of a
        teacher-forced pass over decoder_input_ids int32 [B, T] with no cache."""
        decoder_input_ids = tf.convert_to_tensor(decoder_input_ids, tf.int32)
        length = tf.shape(decoder_input_ids)[1]
        positions = tf.broadcast_to(tf.range(length)[None], tf.shape(decoder_input_ids))
        # Standard causal mask: the keys are the window itself, key j = position j.
        bias, mask = self._decoder_bias(positions[:1], length)
        x, _, collected = self._decoder_layers(self._embed(decoder_input_ids), bias, mask,
                                               context, collect=collect)
        return self._final_decoder_states(x), collected

    def forward_from_encoder(self, encoder_states: tf.Tensor, encoder_mask: tf.Tensor,
                             decoder_input_ids: tf.Tensor) -> tf.Tensor:
        """`forward` from a given encoder output (differentiable).

        A draft with a target-encoder adapter (`attach_target_encoder`) is trained on its
        target's encoder output times the projection (`tfspec.training.target_encoder_draft`),
        and a frozen target computed once per batch serves both models.

        Args:
          encoder_states: [B, S, D] (cast to the compute dtype).
          encoder_mask: bool [B, S], True at valid prompt tokens.
          decoder_input_ids: int32 [B, T], as in `forward`.

        Returns:
          float32 [B, T, V] next-token logits.
        """
        context = self._context(tf.cast(encoder_states, self.compute_dtype), encoder_mask)
        return self.logits_from_states(self._uncached_decoder(context, decoder_input_ids)[0])

    def _collected(self, feature_layers: Tuple[int, ...]) -> Tuple[int, ...]:
        """The block indices `_decoder_layers` must collect for `feature_layers`."""
        count = len(self.decoder_blocks)
        for layer in feature_layers:
            if not -1 <= layer < count:
                raise ValueError(f"feature layer {layer} is outside [-1, {count}) for a target "
                                 f"with {count} decoder layers")
        return tuple(layer for layer in feature_layers if layer >= 0)

    @staticmethod
    def _features(states, collected, feature_layers) -> Optional[tf.Tensor]:
        """Concatenates, in the order of `feature_layers`, the final states (-1) and the
        collected block outputs: float32 [B, W, D x len(feature_layers)], or None."""
        if not feature_layers:
            return None
        by_layer = dict(zip([layer for layer in feature_layers if layer >= 0], collected))
        parts = [states if layer < 0 else by_layer[layer] for layer in feature_layers]
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)

    def forward(self, encoder_ids: tf.Tensor, encoder_lengths: Optional[tf.Tensor],
                decoder_input_ids: tf.Tensor) -> tf.Tensor:
        """Uncached teacher-forced forward pass (differentiable).

        Args:
          encoder_ids: int32 [B, S] left-aligned, padded prompts.
          encoder_lengths: int32 [B] valid prompt tokens per row, or None (no padding).
          decoder_input_ids: int32 [B, T]: the decoder start id then the target shifted right.

        Returns:
          float32 [B, T, V]: entry t is the next-token logits after decoder_input_ids[:, t].
        """
        return self.logits_from_states(
            self.decoder_states(encoder_ids, encoder_lengths, decoder_input_ids))

    def call(self, inputs, training=False):
        """Keras entry point: `inputs` = dict(encoder_ids, encoder_lengths, decoder_input_ids).

        Returns float32 logits [B, T, V] (see `forward`).
        """
        del training  # No dropout: T5 fine-tuning here runs without it.
        return self.forward(inputs["encoder_ids"], inputs.get("encoder_lengths"),
                            inputs["decoder_input_ids"])

    # ------------------------------------------------------------------------ DecodeModel

    # The `WindowedCache` extension of `tfspec/models/protocol.py`: `prepare` takes `window`.
    prepares_windows = True

    def prepare(self, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                max_length: int, window: int = 1) -> Tuple[T5Context, T5Cache]:
        """Runs the encoder once and allocates the decoder cache.

        Args:
          prompt_ids: int32 [B, S], left-aligned, padded with `pad_id`.
          prompt_lengths: int32 [B], valid prompt tokens per row (>= 1).
          max_length: static int, decoder positions the cache holds.
          window: static int, the width of the windows the cache will be decoded with;
            above 1 the keys are laid out [d_kv, max_length] (`T5Cache.keys_transposed`).
            Windows must then fit: positions + W <= max_length.

        Returns:
          (T5Context with cross-attention K/V of every decoder layer [B, H, S, d_kv], the
          encoder mask [B, S] and the float32 LM head [D, V]; T5Cache of zeros
          [B, H, max_length, d_kv] per layer, the keys [B, H, d_kv, max_length] if
          window > 1).
        """
        context = self._context(*self.encode(prompt_ids, prompt_lengths, for_decode=True),
                                for_decode=True)
        return context, self._empty_cache(tf.shape(prompt_ids)[0], max_length, window)

    def _empty_cache(self, batch, max_length: int, window: int) -> T5Cache:
        """The `T5Cache` of zeros that `prepare` returns (see there)."""
        heads, d_kv, length = self._config.num_heads, self._config.d_kv, int(max_length)
        values = tuple(tf.zeros([batch, heads, length, d_kv], self.compute_dtype)
                       for _ in self.decoder_blocks)
        if int(window) > 1:
            keys = tuple(tf.zeros([batch, heads, d_kv, length], self.compute_dtype)
                         for _ in self.decoder_blocks)
            return T5Cache(keys=(), values=values, keys_transposed=keys)
        return T5Cache(keys=tuple(tf.zeros_like(v) for v in values), values=values)

    # ----------------------------------------------------- target-encoder adapter (drafts)

    @property
    def reads_target_encoder(self) -> bool:
        """Whether this model, as a draft, reads its target's encoder output through an
        adapter (`attach_target_encoder`): the `TargetEncoderDraft` extension of
        `tfspec/models/protocol.py`."""
        return self._target_encoder is not None

    @property
    def target_encoder_projection(self) -> Optional[keras.Variable]:
        """float32 [D_target, D], the adapter's projection, or None without an adapter."""
        adapter = self._target_encoder
        return None if adapter is None else adapter.projection

    @property
    def target_encoder_fingerprint(self) -> str:
        """`target_binding.target_fingerprint` of the target the adapter was fitted to ("":
        any target of its width)."""
        adapter = self._target_encoder
        return "" if adapter is None else adapter.target_fingerprint

    @property
    def target_encoder_name(self) -> str:
        """How to get the target the adapter was fitted to ("" if unnamed)."""
        adapter = self._target_encoder
        return "" if adapter is None else adapter.target_name

    def attach_target_encoder(self, projection, target_fingerprint: str = "",
                              target_name: str = "") -> "T5":
        """Makes this model, as a draft, read its target's encoder output instead of its own.

        In `tfspec.generate` its cross-attention then reads encoder_states @ projection,
        where encoder_states [B, S, D_target] is what the target's encoder computed for the
        request anyway, and its own encoder never runs (see `TargetEncoderDraft` in
        `tfspec/models/protocol.py` for why and why it stays exact). The uncached
        `forward` and decoding it alone (k = 0) keep its own encoder.

        Args:
          projection: float [D_target, D] (D = this model's d_model).
          target_fingerprint: `target_binding.target_fingerprint` of the target it was
            fitted to; `bind` refuses any other. "" accepts any target of width D_target.
          target_name: how to get that target (e.g. "zoo:tiny-code-target"), for messages.

        Returns:
          self.

        Raises:
          ValueError: a projection that is not [D_target, D].
        """
        array = np.asarray(projection, np.float32)
        if array.ndim != 2 or array.shape[1] != self._config.d_model or array.shape[0] < 1:
            raise ValueError(f"a target-encoder projection is [target d_model, "
                             f"{self._config.d_model}]; got shape {list(array.shape)}")
        self._target_encoder = _TargetEncoderAdapter(
            keras.Variable(array, dtype="float32", name="target_encoder_projection"),
            str(target_fingerprint),
            str(target_name))
        kernels.drop_panel_cache(self)  # Its next cache has the projection's AMX entry.
        return self

    def detach_target_encoder(self) -> "T5":
        """Drops the adapter: this model runs its own encoder again. Returns self."""
        self._target_encoder = None
        kernels.drop_panel_cache(self)
        return self

    def bind(self, target) -> "T5":
        """Checks that this draft's adapter fits `target` (`tfspec.generate` calls it);
        returns self. Without an adapter any target is accepted here.

        Raises:
          ValueError (one line): a target that is not a T5, of another width, or (with a
            fingerprint) another model than the one the adapter was fitted to.
        """
        adapter = self._target_encoder
        if adapter is None:
            return self
        what = adapter.target_name or "the target it was fitted to"
        config = getattr(target, "config", None)
        if not isinstance(config, T5Config) or not hasattr(target, "encode"):
            raise ValueError(f"a draft that reads its target's encoder needs a T5 target; "
                             f"got {type(target).__name__} (detach_target_encoder() to use "
                             "its own encoder)")
        width = int(adapter.projection.shape[0])
        if config.d_model != width:
            raise ValueError(f"this draft reads the encoder output of a target with d_model "
                             f"{width} ({what}); the target has {config.d_model} "
                             "(detach_target_encoder() to use its own encoder)")
        if adapter.target_fingerprint:
            found = target_binding.cached_fingerprint(target)
            if found != adapter.target_fingerprint:
                raise ValueError(f"this draft's target-encoder adapter was fitted to {what} "
                                 f"(fingerprint {adapter.target_fingerprint}); the target "
                                 f"given is a different model ({found}): pass that target, or "
                                 "call draft.detach_target_encoder() to use its own encoder")
        return self

    def prepare_with_target(self, target, target_context: T5Context, prompt_ids: tf.Tensor,
                            prompt_lengths: tf.Tensor, max_length: int
                            ) -> Tuple[T5Context, T5Cache]:
        """`prepare` without this model's encoder: its context from the target's encoder
        output, projected by the adapter (`attach_target_encoder`).

        Args:
          target: the target (unused: its context carries what is read).
          target_context: the target's `T5Context` of this request; its `encoder_states`
            [B, S, D_target] and `encoder_mask` bool [B, S] are read.
          prompt_ids: int32 [B, S] (its batch size sizes the cache).
          prompt_lengths: unused (the target's encoder_mask holds them).
          max_length: static int, decoder positions the cache holds.

        Returns:
          (T5Context, T5Cache) as `prepare` returns them for a one-position window.
        """
        del target, prompt_lengths
        if self._target_encoder is None:
            raise ValueError("this model has no target-encoder adapter "
                             "(attach_target_encoder); use prepare")
        target_states = tf.cast(target_context.encoder_states, tf.float32)
        panels = kernels.amx_entry(kernels.readable_panel_cache(self),
                                   self._projection_entry(), target_states)
        if panels is None:
            states = tf.einsum("bsd,de->bse", target_states, self._target_encoder.projection)
        else:  # On AMX, as the target's own products: the prompt's padding skipped (0).
            lengths = tf.reduce_sum(tf.cast(target_context.encoder_mask, tf.int32),
                                    axis=1)                                 # left-aligned
            states = kernels.amx_matmul_split(target_states, panels,
                                              int(target_states.shape[-1]),
                                              self._config.d_model, lengths)
        context = self._context(tf.cast(states, self.compute_dtype),
                                target_context.encoder_mask, for_decode=True)
        return context, self._empty_cache(tf.shape(prompt_ids)[0], max_length, window=1)

    # The `LiveWidth` extension of `tfspec/models/protocol.py`: `decode` takes `live_width`.
    decodes_live_width = True

    def decode(self, context: T5Context, cache: T5Cache, ids: tf.Tensor,
               positions: tf.Tensor, live_width: Optional[tf.Tensor] = None
               ) -> Tuple[tf.Tensor, T5Cache]:
        """Decodes a window at per-row positions, writing its K/V into the cache.

        Args:
          context: from `prepare`.
          cache: from `prepare` or a previous `decode`.
          ids: int32 [B, W], the tokens at `positions`.
          positions: int32 [B, W], consecutive per row, in [0, max_length); rows may differ.
          live_width: int32 [B] (or [] for every row) in [0, W], or None (= W): only
            entries w < live_width[b] of row b are needed (0: none, a finished row). Where
            the kernel products serve the call, the other entries are skipped: their logits
            and the K/V they write are unspecified (the loop leaves such slots stale, past
            the row's length), while the needed entries are the same bits as without it
            (every computation is per entry, and an entry's attention reads only slots <=
            its own position). Elsewhere it is ignored.

        Returns:
          (logits float32 [B, W, V] (N columns with a draft vocabulary, see
          `set_draft_vocabulary`), entry w = next-token logits after ids[:, w];
          the cache with slots `positions` of every row overwritten).
        """
        logits, _, cache = self.decode_with_features(context, cache, ids, positions, (),
                                                     live_width)
        return logits, cache

    def decode_with_features(self, context: T5Context, cache: T5Cache, ids: tf.Tensor,
                             positions: tf.Tensor, feature_layers: Tuple[int, ...] = (-1,),
                             live_width: Optional[tf.Tensor] = None
                             ) -> Tuple[tf.Tensor, Optional[tf.Tensor], T5Cache]:
        """`decode` that also hands over the features a feature draft reads (the
        `FeatureTarget` extension of `tfspec/models/protocol.py`).

        Args:
          context, cache, ids, positions, live_width: as in `decode` (features past
            live_width are unspecified too).
          feature_layers: static; -1 is the final decoder states (after the final norm, the
            LM head's input: HF's `last_hidden_state`), i >= 0 the residual stream after
            decoder block i. Empty: no features (plain `decode`).

        Returns:
          (logits float32 [B, W, V], features float32 [B, W, D x len(feature_layers)] (entry
          w: the features at position positions[:, w], whose logits are logits[:, w]) or
          None, the cache).
        """
        ids = tf.convert_to_tensor(ids, tf.int32)
        positions = tf.convert_to_tensor(positions, tf.int32)
        # Static when traced with a static max_length (the loop's case), so the bias and
        # mask below have static shapes; falls back to the dynamic size otherwise.
        key_length = cache.values[0].shape[2] or tf.shape(cache.values[0])[2]
        batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
        heads = self._config.num_heads
        # (row, head, position) of every [d_kv] vector the window writes: [B, H, W, 3].
        grid = [batch, heads, width]
        write_indices = tf.stack([
            tf.broadcast_to(tf.range(batch)[:, None, None], grid),
            tf.broadcast_to(tf.range(heads)[None, :, None], grid),
            tf.broadcast_to(positions[:, None, :], grid)], axis=-1)
        bias, mask = self._decoder_bias(positions, key_length)
        x, cache, collected = self._decoder_layers(
            self._embed_window(ids), bias, mask, context, cache, write_indices,
            collect=self._collected(feature_layers), live_width=live_width)
        states = self._final_decoder_states(x)
        features = self._features(states, collected, feature_layers)
        return self.decode_logits(context, states, single=ids.shape[0] == 1
                                  and ids.shape[1] == 1, live_width=live_width), features, cache

    def decode_logits(self, context: T5Context, states: tf.Tensor,
                      single: bool = False, live_width: Optional[tf.Tensor] = None
                      ) -> tf.Tensor:
        """The decode path's LM head: float32 [B, W, D] final states -> [B, W, V] logits
        ([B, W, N] over a draft vocabulary), through the kernel panels where they apply.

        Args:
          context: from `prepare`.
          states: float32 [B, W, D].
          single: static, a one-row, one-token call (see below).
          live_width: int32 [B] or [] or None, see `decode`.
        """
        columns = (self._config.vocab_size if self._draft_vocabulary is None
                   else self._draft_vocabulary.size)
        if context.lm_head_panels is not None and _kernel_applies(states):
            if self._config.rescales_decoder_output:
                states = states * (self._config.d_model ** -0.5)
            return kernels.matmul(states, context.lm_head_panels, columns, live_width)
        lm_head = context.lm_head
        if (self.lm_head is None and self._dtype_name == "float32" and single
                and self._draft_vocabulary is None):
            # A one-row call of a tied float32 model reads `shared` [V, D] directly: a
            # matrix-vector product as fast as with the [D, V] copy (measured), and XLA
            # then drops the per-request transpose when no call of the program uses it
            # (autoregressive targets and every draft step at batch 1).
            lm_head = None
        return self.logits_from_states(states, lm_head)

    # ---------------------------------------------------------------------- checkpoint names

    def hf_weight_map(self) -> Dict[str, Tuple[keras.Variable, bool]]:
        """Maps HF checkpoint tensor names to (variable, transposed).

        `transposed` is True for Linear kernels: HF stores them [out, in], this model [in, out].
        Tied models have no `lm_head.weight` (the head is `shared.weight`).
        """
        mapping = {"shared.weight": (self.shared, False)}
        for i, block in enumerate(self.encoder_blocks):
            for name, var, transposed in block.hf_weights(f"encoder.block.{i}"):
                mapping[name] = (var, transposed)
        mapping["encoder.final_layer_norm.weight"] = (self.encoder_final_norm.weight, False)
        for i, block in enumerate(self.decoder_blocks):
            for name, var, transposed in block.hf_weights(f"decoder.block.{i}"):
                mapping[name] = (var, transposed)
        mapping["decoder.final_layer_norm.weight"] = (self.decoder_final_norm.weight, False)
        if self.lm_head is not None:
            mapping["lm_head.weight"] = (self.lm_head, True)
        return mapping
