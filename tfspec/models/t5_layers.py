"""The building blocks of T5: RMS norm, relative position buckets, attention, feed-forward.

Each Keras layer here only *owns weights* and exposes plain tensor functions; `tfspec.models.T5`
wires them into the encoder, the cached decoder and the uncached decoder. Keeping the math in
plain functions (no `Layer.__call__`) keeps traced graphs small inside `tf.while_loop` and makes
the cached and uncached paths run the very same code.

Numerics follow Hugging Face transformers' `modeling_t5` (the reference every public T5
checkpoint is validated against):

- RMS norm without mean subtraction, computed in float32.
- No 1/sqrt(d_kv) scaling of attention scores (T5 folds it into the initialisation of `q`).
- Relative position = key position - query position, bucketed by `relative_position_bucket`
  (HF's `_relative_position_bucket`, same float32 operations so bucket edges agree).
- Softmax in float32.

Weight layout: Linear kernels are stored [in, out] (Keras convention); HF stores [out, in], so
checkpoint code transposes them (see `T5.hf_weight_map`).
"""

import math
from typing import Callable, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from tfspec import kernels

# Logit given to masked-out attention slots. A finite value (not -inf) so that a row whose
# keys are all masked yields a uniform distribution rather than NaN; with float32 softmax any
# unmasked score wins by exp(1e9) and masked slots get probability exactly 0.
_MASKED_SCORE = -1e9


def normal_initializer(rng: np.random.Generator, stddev: float) -> Callable:
    """Returns a Keras initializer drawing N(0, stddev^2) from `rng` (reproducible by seed).

    NumPy generates the values so that `T5(config, seed)` gives the same weights on every
    TensorFlow version and device.
    """

    def init(shape, dtype=None):
        values = rng.standard_normal(size=tuple(shape), dtype=np.float32) * np.float32(stddev)
        return tf.cast(tf.constant(values), dtype or tf.float32)

    return init


def _initializer(rng: Optional[np.random.Generator], stddev: float):
    # rng None: weights are about to be overwritten by a checkpoint, so skip the random draw.
    return "zeros" if rng is None else normal_initializer(rng, stddev)


def rms_norm(x: tf.Tensor, weight: tf.Tensor, epsilon: float, out_dtype) -> tf.Tensor:
    """T5 layer norm: `weight * x / sqrt(mean(x^2) + eps)`, no mean subtraction, no bias.

    Args:
      x: [..., D] any float dtype.
      weight: [D] scale.
      epsilon: variance epsilon.
      out_dtype: dtype of the result.

    Returns:
      [..., D] in `out_dtype`; the statistics and the scaling are computed in float32.
    """
    x32 = tf.cast(x, tf.float32)
    variance = tf.reduce_mean(tf.square(x32), axis=-1, keepdims=True)
    x32 = x32 * tf.math.rsqrt(variance + epsilon)
    return tf.cast(tf.cast(weight, tf.float32) * x32, out_dtype)


def relative_position_bucket(relative_position: tf.Tensor, bidirectional: bool,
                             num_buckets: int, max_distance: int) -> tf.Tensor:
    """Maps relative positions to bucket ids, exactly as HF's `_relative_position_bucket`.

    Half of the buckets (of each direction when bidirectional) hold exact distances
    0..max_exact-1; the rest are logarithmically wider up to `max_distance`, beyond which all
    distances share the last bucket. Unidirectional (decoder) buckets map every positive
    relative position (a future key) to bucket 0; such keys are masked out anyway.

    Args:
      relative_position: int32 tensor of any shape, key position - query position.
      bidirectional: True for the encoder, False for the decoder.
      num_buckets: `relative_attention_num_buckets`.
      max_distance: `relative_attention_max_distance`.

    Returns:
      int32 tensor of the same shape, values in [0, num_buckets).
    """
    relative_position = tf.cast(relative_position, tf.int32)
    buckets = tf.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += tf.cast(relative_position > 0, tf.int32) * num_buckets
        distance = tf.abs(relative_position)
    else:
        distance = -tf.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # Same float32 operations in the same order as HF (log, divide by the float32 constant
    # log(max_distance / max_exact), multiply, truncate), so edge distances such as 16, 32,
    # 64 in the encoder fall into the same bucket. max(distance, 1) avoids log(0) = -inf
    # for entries that `is_small` selects away anyway (XLA need not see inf -> int casts).
    distance_f = tf.cast(tf.maximum(distance, 1), tf.float32)
    log_ratio = tf.math.log(distance_f / float(max_exact)) / math.log(max_distance / max_exact)
    if_large = max_exact + tf.cast(log_ratio * float(num_buckets - max_exact), tf.int32)
    if_large = tf.minimum(if_large, num_buckets - 1)
    return buckets + tf.where(is_small, distance, if_large)


def attend(query: tf.Tensor, keys: tf.Tensor, values: tf.Tensor,
           bias: Optional[tf.Tensor], mask: tf.Tensor,
           keys_transposed: bool = False, kernel_products: bool = False) -> tf.Tensor:
    """Multi-head attention core with additive bias and a boolean mask (no 1/sqrt(d) scale).

    Every tensor is head-major ([B, H, ...]): the two dots then have their batch dimensions
    (b, h) leading and contract the minor dimension, which is the layout XLA's dot emitters
    take without a transpose. With the KV cache stored [B, H, L, d_kv] too, a decode step
    reads the cache in place instead of transposing all of it (measured in
    `bench.round_breakdown`).

    Args:
      query: [B, H, W, d_kv] compute dtype.
      keys: [B, H, L, d_kv] compute dtype; [B, H, d_kv, L] with `keys_transposed`.
      values: [B, H, L, d_kv] compute dtype.
      bias: float32 broadcastable to [B, H, W, L], or None.
      mask: bool broadcastable to [B, H, W, L]; True = may attend.
      keys_transposed: whether `keys` is [B, H, d_kv, L], the layout a window of several
        queries reads without a transpose (`T5Context.cross_keys_transposed`,
        `T5Cache.keys_transposed`).
      kernel_products: compute both products with `tfspec.kernels.batched_matmul` (float32,
        `keys_transposed`, inside an XLA program where `kernels.enabled()`): a few-row
        window then costs about what one row does, and a row's attention is the same bits
        alone or in a window.

    Returns:
      [B, H, W, d_kv] in the dtype of `values`.
    """
    if kernel_products:
        if not keys_transposed:
            raise ValueError("kernel_products needs the keys laid out [B, H, d_kv, L]")
        scores = kernels.batched_matmul(query, keys)
    else:
        equation = "bhwd,bhdl->bhwl" if keys_transposed else "bhwd,bhld->bhwl"
        scores = tf.cast(tf.einsum(equation, query, keys), tf.float32)
    if bias is not None:
        scores = scores + bias
    # tf.where (not an additive mask): masked slots get a fixed score whatever the stale cache
    # slot holds, so garbage keys beyond a row's length cannot leak through overflow.
    scores = tf.where(mask, scores, _MASKED_SCORE)
    probs = tf.nn.softmax(scores, axis=-1)
    if kernel_products:
        return tf.cast(kernels.batched_matmul(probs, values), values.dtype)
    return tf.einsum("bhwl,bhld->bhwd", tf.cast(probs, values.dtype), values)


def mask_into_bias(bias: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """float32 [B, H, W, L]: `bias` where `mask` is True, the masked score elsewhere (for
    `attend_with_masked_bias`; once per call, not once per layer).

    Args:
      bias: float32 broadcastable to [B, H, W, L].
      mask: bool broadcastable to [B, H, W, L]; True = may attend.
    """
    return tf.where(mask, bias, _MASKED_SCORE)


def attend_with_masked_bias(query: tf.Tensor, keys: tf.Tensor, values: tf.Tensor,
                            masked_bias: tf.Tensor) -> tf.Tensor:
    """`attend` over keys that are all finite (an encoder's), with the mask already in the
    bias (`mask_into_bias`), normalizing after the value product.

    The same attention as `attend(query, keys, values, bias, mask)` up to rounding: a masked
    slot scores s - 1e9 instead of -1e9, and both give it probability exactly 0 beside any
    unmasked slot. Two passes over the [B, H, W, L] scores fewer per layer: no select (the
    mask is added with the bias), and the division by the softmax's sum applies to the
    [B, H, W, d_kv] output instead of the probabilities. On the embedded target's 384-wide
    prompt bucket this took 3.6 ms (12%) off a request's fixed cost (interleaved, 7
    repeats). Not for a decode cache, whose stale slots may hold anything (see `attend`).

    Args:
      query: [B, H, W, d_kv] compute dtype.
      keys: [B, H, L, d_kv] compute dtype.
      values: [B, H, L, d_kv] compute dtype.
      masked_bias: float32 broadcastable to [B, H, W, L].

    Returns:
      [B, H, W, d_kv] in the dtype of `values`.
    """
    scores = tf.cast(tf.einsum("bhwd,bhld->bhwl", query, keys), tf.float32) + masked_bias
    # The usual max shift for a stable exp; the softmax does not depend on it, so no
    # gradient flows through it.
    shifted = scores - tf.stop_gradient(tf.reduce_max(scores, axis=-1, keepdims=True))
    weights = tf.exp(shifted)
    total = tf.reduce_sum(weights, axis=-1, keepdims=True)  # [B, H, W, 1]
    heads = tf.einsum("bhwl,bhld->bhwd", tf.cast(weights, values.dtype), values)
    return tf.cast(tf.cast(heads, tf.float32) / total, values.dtype)


def _activation(name: str) -> Callable[[tf.Tensor], tf.Tensor]:
    if name == "relu":
        return tf.nn.relu
    if name == "gelu":  # HF "gelu": exact erf form.
        return lambda x: tf.nn.gelu(x, approximate=False)
    if name == "gelu_new":  # HF "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
        return lambda x: tf.nn.gelu(x, approximate=True)
    if name == "silu":
        return tf.nn.silu
    raise ValueError(f"Unsupported activation {name!r}.")


class RMSNorm(keras.layers.Layer):
    """T5LayerNorm weights ([D], HF name `...layer_norm.weight`)."""

    def __init__(self, d_model: int, epsilon: float, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.weight = self.add_weight(name="weight", shape=(d_model,), initializer="ones")

    def normalize(self, x: tf.Tensor, out_dtype) -> tf.Tensor:
        """[..., D] -> [..., D] in `out_dtype` (float32 statistics)."""
        return rms_norm(x, self.weight, self.epsilon, out_dtype)


class T5Attention(keras.layers.Layer):
    """Weights of one attention block: q, k, v [D, H*d_kv], o [H*d_kv, D], optional bias table.

    `relative_attention_bias` ([num_buckets, H]) exists only in the first self-attention layer
    of each stack; the other layers reuse the bias that layer computes.
    """

    def __init__(self, d_model: int, num_heads: int, d_kv: int, has_relative_bias: bool,
                 num_buckets: int, rng: Optional[np.random.Generator], **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_kv = d_kv
        inner = num_heads * d_kv
        # HF's _init_weights (initializer_factor 1.0): q carries the 1/sqrt(d_kv) scale that
        # T5 leaves out of the attention scores.
        self.q = self.add_weight(name="q", shape=(d_model, inner),
                                 initializer=_initializer(rng, (d_model * d_kv) ** -0.5))
        self.k = self.add_weight(name="k", shape=(d_model, inner),
                                 initializer=_initializer(rng, d_model ** -0.5))
        self.v = self.add_weight(name="v", shape=(d_model, inner),
                                 initializer=_initializer(rng, d_model ** -0.5))
        self.o = self.add_weight(name="o", shape=(inner, d_model),
                                 initializer=_initializer(rng, inner ** -0.5))
        self.relative_attention_bias = None
        if has_relative_bias:
            self.relative_attention_bias = self.add_weight(
                name="relative_attention_bias", shape=(num_buckets, num_heads),
                initializer=_initializer(rng, d_model ** -0.5))

    def split_heads(self, y: tf.Tensor) -> tf.Tensor:
        """[B, T, H * d_kv] -> head-major [B, H, T, d_kv] (see `attend`).

        The transpose moves only the T new rows, never a cache.
        """
        y = tf.reshape(y, tf.concat([tf.shape(y)[:2], [self.num_heads, self.d_kv]], 0))
        return tf.transpose(y, [0, 2, 1, 3])

    @staticmethod
    def merge_heads(heads: tf.Tensor) -> tf.Tensor:
        """[B, H, T, d_kv] -> [B, T, H * d_kv]; -1 keeps the batch/time dims dynamic."""
        heads = tf.transpose(heads, [0, 2, 1, 3])  # [B, T, H, d_kv]
        return tf.reshape(heads, tf.concat([tf.shape(heads)[:2], [-1]], 0))

    def _heads(self, x: tf.Tensor, kernel) -> tf.Tensor:
        # [B, T, D] @ [D, H*d_kv] -> head-major [B, H, T, d_kv].
        return self.split_heads(tf.einsum("btd,dk->btk", x, tf.cast(kernel, x.dtype)))

    def query(self, x: tf.Tensor) -> tf.Tensor:
        """[B, T, D] -> [B, H, T, d_kv]."""
        return self._heads(x, self.q)

    def keys_values(self, x: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """[B, T, D] -> ([B, H, T, d_kv], [B, H, T, d_kv])."""
        return self._heads(x, self.k), self._heads(x, self.v)

    def keys_values_on_amx(self, x: tf.Tensor, kv_panels: tf.Tensor,
                           lengths: Optional[tf.Tensor] = None
                           ) -> Tuple[tf.Tensor, tf.Tensor]:
        """`keys_values` as one AMX product of k | v side by side (`kv_panels`: the AMX
        panels of the [D, 2 H d_kv] concatenation, `tfspec.kernels.amx_panels`).

        Args:
          x: float32 [B, T, D], static shape, inside an XLA program.
          kv_panels: bfloat16 AMX panels of concat([k, v], axis=1).
          lengths: int32 [B] or None; positions t >= lengths[b] come out 0.

        Returns:
          ([B, H, T, d_kv], [B, H, T, d_kv]) float32.
        """
        both = kernels.amx_matmul(x, kv_panels, x.shape[-1], 2 * self.num_heads * self.d_kv,
                                  lengths)
        keys, values = tf.split(both, 2, axis=-1)
        return self.split_heads(keys), self.split_heads(values)

    def project_output(self, heads: tf.Tensor) -> tf.Tensor:
        """[B, H, T, d_kv] -> [B, T, D]."""
        return self.project_merged(self.merge_heads(heads))

    def project_merged(self, merged: tf.Tensor) -> tf.Tensor:
        """Heads merged, [B, T, H * d_kv] -> [B, T, D]."""
        return tf.einsum("btk,kd->btd", merged, tf.cast(self.o, merged.dtype))

    def project_qkv(self, x: tf.Tensor) -> tf.Tensor:
        """[B, T, D] -> queries | keys | values side by side, [B, T, 3 * H * d_kv]."""
        kernel = tf.concat([self.q, self.k, self.v], axis=1)
        return tf.einsum("btd,dk->btk", x, tf.cast(kernel, x.dtype))

    def position_bias(self, relative_position: tf.Tensor, bidirectional: bool,
                      max_distance: int) -> tf.Tensor:
        """Bias from the table for key - query positions.

        Args:
          relative_position: int32 [..., Q, K] (any leading dims, e.g. [B, W, L] or [Q, K]).
          bidirectional: True in the encoder.
          max_distance: `relative_attention_max_distance`.

        Returns:
          float32 [..., H, Q, K] (heads moved before the query axis to match the scores).
        """
        num_buckets = self.relative_attention_bias.shape[0]
        buckets = relative_position_bucket(relative_position, bidirectional, num_buckets,
                                           max_distance)
        bias = tf.gather(tf.cast(self.relative_attention_bias, tf.float32), buckets)
        rank = len(bias.shape)  # [..., Q, K, H]
        perm = list(range(rank - 3)) + [rank - 1, rank - 3, rank - 2]
        return tf.transpose(bias, perm)


class T5FeedForward(keras.layers.Layer):
    """`DenseReluDense` weights: `wo(act(wi x))`, or gated `wo(act(wi_0 x) * wi_1 x)`."""

    def __init__(self, d_model: int, d_ff: int, activation: str, gated: bool,
                 rng: Optional[np.random.Generator], **kwargs):
        super().__init__(**kwargs)
        self.gated = gated
        self.activation_name = activation
        self._act = _activation(activation)
        if gated:
            self.wi_0 = self.add_weight(name="wi_0", shape=(d_model, d_ff),
                                        initializer=_initializer(rng, d_model ** -0.5))
            self.wi_1 = self.add_weight(name="wi_1", shape=(d_model, d_ff),
                                        initializer=_initializer(rng, d_model ** -0.5))
        else:
            self.wi = self.add_weight(name="wi", shape=(d_model, d_ff),
                                      initializer=_initializer(rng, d_model ** -0.5))
        self.wo = self.add_weight(name="wo", shape=(d_ff, d_model),
                                  initializer=_initializer(rng, d_ff ** -0.5))

    def transform(self, x: tf.Tensor) -> tf.Tensor:
        """[B, T, D] -> [B, T, D] in the dtype of `x`."""

        def dense(h, kernel):
            return tf.einsum("btd,df->btf", h, tf.cast(kernel, h.dtype))

        if self.gated:
            hidden = self._act(dense(x, self.wi_0)) * dense(x, self.wi_1)
        else:
            hidden = self._act(dense(x, self.wi))
        return dense(hidden, self.wo)

    def input_kernel(self) -> tf.Tensor:
        """[D, 2 * d_ff] (gated: wi_0 | wi_1 side by side) or [D, d_ff] (wi)."""
        if self.gated:
            return tf.concat([self.wi_0, self.wi_1], axis=1)
        return tf.convert_to_tensor(self.wi)

    @property
    def input_kernel_width(self) -> int:
        """Columns of `input_kernel()`: 2 * d_ff (gated) or d_ff."""
        return int((self.wi_0 if self.gated else self.wi).shape[1]) * (2 if self.gated else 1)

    def hidden(self, projected: tf.Tensor) -> tf.Tensor:
        """The activation applied to `x @ input_kernel()`: [B, T, 2 * d_ff | d_ff] ->
        [B, T, d_ff] (the same values `transform` feeds to wo)."""
        if self.gated:
            gate, linear = tf.split(projected, 2, axis=-1)
            return self._act(gate) * linear
        return self._act(projected)


class T5Block(keras.layers.Layer):
    """One encoder block (self-attention, FFN) or decoder block (+ cross-attention).

    HF names: `layer.0` = self-attention and its norm, `layer.1` = cross-attention (decoder)
    or FFN (encoder), `layer.2` = FFN (decoder).
    """

    def __init__(self, config, is_decoder: bool, has_relative_bias: bool,
                 rng: Optional[np.random.Generator], **kwargs):
        super().__init__(**kwargs)
        d, eps = config.d_model, config.layer_norm_epsilon
        self.is_decoder = is_decoder
        self.self_attention_norm = RMSNorm(d, eps, dtype=self.dtype_policy,
                                           name="self_attention_norm")
        self.self_attention = T5Attention(
            d, config.num_heads, config.d_kv, has_relative_bias,
            config.relative_attention_num_buckets, rng, dtype=self.dtype_policy,
            name="self_attention")
        if is_decoder:
            self.cross_attention_norm = RMSNorm(d, eps, dtype=self.dtype_policy,
                                                name="cross_attention_norm")
            self.cross_attention = T5Attention(
                d, config.num_heads, config.d_kv, False, config.relative_attention_num_buckets,
                rng, dtype=self.dtype_policy, name="cross_attention")
        self.ffn_norm = RMSNorm(d, eps, dtype=self.dtype_policy, name="ffn_norm")
        self.ffn = T5FeedForward(d, config.d_ff, config.dense_act_fn, config.is_gated_act, rng,
                                 dtype=self.dtype_policy, name="ffn")

    def hf_weights(self, prefix: str):
        """Yields (HF name, variable, transposed) for this block; prefix like 'encoder.block.0'."""
        sa = f"{prefix}.layer.0"
        for n in ("q", "k", "v", "o"):
            yield f"{sa}.SelfAttention.{n}.weight", getattr(self.self_attention, n), True
        if self.self_attention.relative_attention_bias is not None:
            yield (f"{sa}.SelfAttention.relative_attention_bias.weight",
                   self.self_attention.relative_attention_bias, False)
        yield f"{sa}.layer_norm.weight", self.self_attention_norm.weight, False
        ff_index = 1
        if self.is_decoder:
            ca = f"{prefix}.layer.1"
            for n in ("q", "k", "v", "o"):
                yield f"{ca}.EncDecAttention.{n}.weight", getattr(self.cross_attention, n), True
            yield f"{ca}.layer_norm.weight", self.cross_attention_norm.weight, False
            ff_index = 2
        ff = f"{prefix}.layer.{ff_index}"
        names = ("wi_0", "wi_1", "wo") if self.ffn.gated else ("wi", "wo")
        for n in names:
            yield f"{ff}.DenseReluDense.{n}.weight", getattr(self.ffn, n), True
        yield f"{ff}.layer_norm.weight", self.ffn_norm.weight, False
