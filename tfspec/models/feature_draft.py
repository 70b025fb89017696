"""`FeatureDraft`: an EAGLE-style draft that drafts from the target's own features.

EAGLE (Li et al. 2024) drafts in the target's feature space instead of from tokens alone:
one decoder layer reads the target's feature at position t - 1 together with the embedding
of the token at t, predicts the target's feature at t, and the *target's* LM head turns that
prediction into the draft distribution q of the token at t + 1. Its proposals are verified by
the ordinary rule, so the output distribution stays the target's (any q is allowed, as long as
q depends only on the prefix and on the draft's own random draws; the target's features at
committed positions are a function of the prefix).

This is the encoder-decoder version. The draft owns no encoder: its cross-attention reads the
target's encoder output (`T5Context.encoder_states`), so a request pays no draft encoder. It
owns no embedding or LM head either: it binds to its target (`bind`) and reads the target's
`shared` embedding and LM head, so no target weight is stored twice. A draft trained for one
target refuses any other (`target_fingerprint`).

One decode step at position t (the protocol extension is in `tfspec/models/protocol.py`):

    x    = fuse([norm(f_{t-1}), norm(embed(token_t))])    f: the target's feature, or the
                                                           draft's own prediction of it
    x    = T5 decoder block(x): self-attention over the draft's cache, cross-attention to the
           target's encoder output, feed-forward
    f^_t = final_norm(x)                                   the predicted feature at t
    q    = softmax(LM_head(f^_t)) over the draft vocabulary, 0 elsewhere

`feature_layers` picks the target features (EAGLE-3's fusion of low, middle and top layers:
e.g. (0, 2, -1)); with more than the top layer (-1) a learned `from_target` projection maps
their concatenation into the draft's input space, where the draft's own predictions live too.

A reduced draft vocabulary (`draft_vocab_size` < V) restricts q to the N most frequent
tokens (q = 0 elsewhere). That stays exact: a token q never proposes is still reachable
through the residual max(0, p - q). On a small target the LM head dominates a draft step.

Training (`tfspec.training.feature_draft`) runs `rollout`: teacher-forced on the target's
true features, plus, with depth > 1, EAGLE-3's "training-time test": passes that feed the
draft its own predicted features with exactly the attention pattern a decode round sees.
"""

import dataclasses
from typing import List, NamedTuple, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from tfspec import kernels
from tfspec.models.t5_config import T5Config
from tfspec.models.t5_layers import RMSNorm, T5Block, attend, normal_initializer
from tfspec.models.target_binding import (  # pylint: disable=unused-import
    TargetBoundDraft, draft_vocabulary, kernel_applies, target_fingerprint)

ARCHITECTURE = "T5FeatureDraft"


@dataclasses.dataclass(frozen=True)
class FeatureDraftConfig:
    """The shape of a `FeatureDraft` (its `config.json`).

    Attributes:
      vocab_size: the target's V.
      d_model: the target's d_model (the feature space the draft predicts in).
      num_heads, d_kv, d_ff: the draft block's attention and feed-forward sizes.
      feature_layers: the target features read at a committed position: -1 is the target's
        final decoder states, i >= 0 the residual stream after its decoder block i.
      draft_vocab_size: N, the size of the draft vocabulary (N = V: all of it).
      cross_attention: whether the block cross-attends to the target's encoder output.
      feed_forward_proj: as in `T5Config` ("gated-gelu", "relu", ...).
      rescales_states: the target's `rescales_decoder_output` (tied v1.0 heads).
      target_fingerprint: `target_fingerprint(target)` of the target this draft was trained
        for; "" binds to any target of matching shapes (tests, fresh models).
      target_name: how to get that target (e.g. "zoo:tiny-code-target"), for messages.
    """

    vocab_size: int
    d_model: int
    num_heads: int
    d_kv: int
    d_ff: int
    feature_layers: Tuple[int, ...] = (-1,)
    draft_vocab_size: Optional[int] = None
    cross_attention: bool = True
    feed_forward_proj: str = "gated-gelu"
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    rescales_states: bool = False
    eos_token_id: Optional[int] = 1
    pad_token_id: int = 0
    decoder_start_token_id: int = 0
    target_fingerprint: str = ""
    target_name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))
        if not self.feature_layers or len(set(self.feature_layers)) != len(self.feature_layers):
            raise ValueError(f"feature_layers must be distinct layer indices, got "
                             f"{self.feature_layers}")
        if self.draft_vocab_size is None:
            object.__setattr__(self, "draft_vocab_size", self.vocab_size)
        if not 1 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size must be in [1, vocab_size = {self.vocab_size}], "
                             f"got {self.draft_vocab_size}")

    @classmethod
    def for_target(cls, target, **overrides) -> "FeatureDraftConfig":
        """The config of a draft for `target` (a `tfspec.models.T5`): the target's sizes and
        ids, with `overrides` (e.g. d_ff, feature_layers, draft_vocab_size)."""
        c = target.config
        values = dict(vocab_size=c.vocab_size, d_model=c.d_model, num_heads=c.num_heads,
                      d_kv=c.d_kv, d_ff=c.d_ff, feed_forward_proj=c.feed_forward_proj,
                      relative_attention_num_buckets=c.relative_attention_num_buckets,
                      relative_attention_max_distance=c.relative_attention_max_distance,
                      layer_norm_epsilon=c.layer_norm_epsilon,
                      rescales_states=c.rescales_decoder_output, eos_token_id=c.eos_token_id,
                      pad_token_id=c.pad_token_id,
                      decoder_start_token_id=c.decoder_start_token_id)
        values.update(overrides)
        return cls(**values)

    def block_config(self) -> T5Config:
        """The `T5Config` of the draft's one decoder block."""
        return T5Config(vocab_size=self.vocab_size, d_model=self.d_model, d_kv=self.d_kv,
                        d_ff=self.d_ff, num_layers=1, num_heads=self.num_heads,
                        feed_forward_proj=self.feed_forward_proj,
                        relative_attention_num_buckets=self.relative_attention_num_buckets,
                        relative_attention_max_distance=self.relative_attention_max_distance,
                        layer_norm_epsilon=self.layer_norm_epsilon,
                        eos_token_id=self.eos_token_id, pad_token_id=self.pad_token_id,
                        decoder_start_token_id=self.decoder_start_token_id)

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values["feature_layers"] = list(self.feature_layers)
        return {"architectures": [ARCHITECTURE], "model_type": "tfspec_feature_draft",
                **values}

    @classmethod
    def from_dict(cls, values: dict) -> "FeatureDraftConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields - {"architectures", "model_type", "dtype"})
        if unknown:
            raise ValueError(f"unknown feature-draft config keys: {', '.join(unknown)}")
        return cls(**{k: v for k, v in values.items() if k in fields})


class FeatureDraftContext(NamedTuple):
    """What `prepare_with_target` computes once per request (captured by the loop).

    Attributes:
      cross_keys, cross_values: [B, H, S, d_kv] from the target's encoder output, or None
        without cross-attention.
      encoder_mask: bool [B, S].
      lm_head: float32 [D, N], the target's LM head restricted to the draft vocabulary.
      panels: the decode products in the `tfspec.kernels` layout (`FeatureDraftPanels`),
        or None (XLA's dots).
    """

    cross_keys: Optional[tf.Tensor]
    cross_values: Optional[tf.Tensor]
    encoder_mask: tf.Tensor
    lm_head: tf.Tensor
    panels: Optional["FeatureDraftPanels"] = None


class FeatureDraftPanels(NamedTuple):
    """The draft's decode products as `tfspec.kernels` panels (see `T5LayerPanels`)."""

    fuse: tf.Tensor         # K = 2 D, N = D
    self_qkv: tf.Tensor     # K = D, N = 3 H d_kv
    self_out: tf.Tensor     # K = H d_kv, N = D
    cross_query: tf.Tensor  # K = D, N = H d_kv (a zero-size stand-in without cross-attention)
    cross_out: tf.Tensor
    ffn_in: tf.Tensor       # K = D, N = 2 d_ff (gated) or d_ff
    ffn_out: tf.Tensor      # K = d_ff, N = D
    lm_head: tf.Tensor      # K = D, N = draft vocabulary


class FeatureDraftCache(NamedTuple):
    """The draft block's self-attention cache: keys, values [B, H, max_length, d_kv]; slot j
    holds position j, written from (feature at j - 1, token at j)."""

    keys: tf.Tensor
    values: tf.Tensor


class FeatureDraft(TargetBoundDraft, keras.Model):
    """An EAGLE-style feature draft for a T5 target (see the module docstring).

    The `FeatureDraft` extension of the `DecodeModel` protocol (`tfspec/models/protocol.py`):
    `uses_target_features`, `bind`, `prepare_with_target`, `input_features` and a `decode`
    that takes and returns features.

    Args:
      config: a `FeatureDraftConfig`.
      seed: seed of the random initialisation.
      initialize: "random" or "zeros" (a checkpoint overwrites every weight).
    """

    KIND = "feature draft"

    @property
    def draft_vocab_ids(self):
        """None (all V), or int32 [N] ascending: the draft vocabulary `decode` returns
        logits over (the `DraftVocabulary` extension of `tfspec/models/protocol.py`), so
        that a draft step's argmax, transform and sampling are N wide, not V wide."""
        return None if self.full_vocabulary else self.draft_vocab
    RECIPE = ("python -m recipes.tiny_code.train --stage feature_draft, see "
              "configs/zoo_tiny_code_eagle.py")

    def __init__(self, config: FeatureDraftConfig, seed: int = 0, *,
                 initialize: str = "random", name: str = "feature_draft"):
        super().__init__(name=name, dtype="float32")
        self._config = config
        self.seed = seed
        self._binding = None
        self._alone: Optional["FeatureDraftAlone"] = None
        self.tokenizer_path: Optional[str] = None
        rng = np.random.default_rng(seed) if initialize == "random" else None
        d = config.d_model
        block_config = config.block_config()
        self._block_config = block_config

        def init(shape, stddev):
            return "zeros" if rng is None else normal_initializer(rng, stddev)

        width = d * len(config.feature_layers)
        self.from_target = None
        if config.feature_layers != (-1,):
            self.from_target = self.add_weight(name="from_target", shape=(width, d),
                                               initializer=init((width, d), width ** -0.5))
        self.feature_norm = RMSNorm(d, config.layer_norm_epsilon, name="feature_norm")
        self.embedding_norm = RMSNorm(d, config.layer_norm_epsilon, name="embedding_norm")
        self.fuse = self.add_weight(name="fuse", shape=(2 * d, d),
                                    initializer=init((2 * d, d), (2 * d) ** -0.5))
        self.block = T5Block(block_config, is_decoder=config.cross_attention,
                             has_relative_bias=True, rng=rng, name="block")
        self.final_norm = RMSNorm(d, config.layer_norm_epsilon, name="final_norm")
        # The draft vocabulary (ids of the target vocabulary), N = V: identity.
        self.draft_vocab = self.add_weight(
            name="draft_vocab", shape=(config.draft_vocab_size,), dtype="int32",
            trainable=False,
            initializer=keras.initializers.Constant(np.arange(config.draft_vocab_size)))

    # ---------------------------------------------------------------------------- binding

    def alone(self) -> "FeatureDraftAlone":
        """This draft (bound) as a `DecodeModel` fed its own predictions (benchmarks' c)."""
        self._bound()
        if self._alone is None:
            self._alone = FeatureDraftAlone(self)
        return self._alone

    # ------------------------------------------------------------------------ the layer

    def input_features(self, target_features: tf.Tensor) -> tf.Tensor:
        """The target's features float32 [B, T, F] -> the draft's input space [B, T, D]
        (where its own predictions live): the identity for the top layer alone."""
        if self.from_target is None:
            return target_features
        return tf.einsum("btf,fd->btd", target_features, self.from_target)

    def _product(self, x, panel, kernel_fn, n_dim: int) -> tf.Tensor:
        """x float32 [B, W, K] @ a [K, n_dim] kernel: the panels in a kernel program."""
        if panel is not None:
            return kernels.matmul(x, panel, n_dim)
        return tf.einsum("bwk,kn->bwn", x, kernel_fn())

    def _block_step(self, features, ids, self_attend_fn, context_keys, context_values,
                    encoder_mask, panels: Optional[FeatureDraftPanels] = None):
        """The draft layer on a window, up to its predicted features.

        Args:
          features: float32 [B, W, D], the input features (position t: feature of t - 1).
          ids: int32 [B, W], the tokens at the window's positions.
          self_attend_fn: (query, keys, values) [B, H, W, d_kv] -> heads [B, H, W, d_kv]:
            the self-attention over the cache (decode) or over the rollout (training).
          context_keys, context_values: [B, H, S, d_kv] or None (no cross-attention).
          encoder_mask: bool [B, S].
          panels: `FeatureDraftPanels` in a kernel program, else None.

        Returns:
          predicted features float32 [B, W, D].
        """
        block, c = self.block, self._config
        inner = c.num_heads * c.d_kv
        ffn_width = 2 * c.d_ff if block.ffn.gated else c.d_ff
        pick = (lambda name: None) if panels is None else (lambda name: getattr(panels, name))
        x = tf.concat([self.feature_norm.normalize(features, tf.float32),
                       self.embedding_norm.normalize(self._embed(ids), tf.float32)], axis=-1)
        x = self._product(x, pick("fuse"), lambda: self.fuse, c.d_model)

        attention = block.self_attention
        h = block.self_attention_norm.normalize(x, tf.float32)
        qkv = self._product(h, pick("self_qkv"),
                            lambda: tf.concat([attention.q, attention.k, attention.v], 1),
                            3 * inner)
        query, keys, values = (attention.split_heads(y) for y in tf.split(qkv, 3, axis=-1))
        heads = self_attend_fn(query, keys, values)
        x = x + self._product(attention.merge_heads(heads), pick("self_out"),
                              lambda: attention.o, c.d_model)
        if c.cross_attention:
            cross = block.cross_attention
            h = block.cross_attention_norm.normalize(x, tf.float32)
            query = cross.split_heads(self._product(h, pick("cross_query"), lambda: cross.q,
                                                    inner))
            heads = attend(query, context_keys, context_values, None,
                           encoder_mask[:, None, None, :])
            x = x + self._product(cross.merge_heads(heads), pick("cross_out"),
                                  lambda: cross.o, c.d_model)
        h = block.ffn_norm.normalize(x, tf.float32)
        hidden = block.ffn.hidden(self._product(h, pick("ffn_in"), block.ffn.input_kernel,
                                                ffn_width))
        x = x + self._product(hidden, pick("ffn_out"), lambda: block.ffn.wo, c.d_model)
        return self.final_norm.normalize(x, tf.float32)

    def _bias(self, query_positions: tf.Tensor, key_length) -> Tuple[tf.Tensor, tf.Tensor]:
        """Decoder relative bias float32 [B, H, W, L] and causal mask bool [B, 1, W, L]."""
        relative = tf.range(key_length)[None, None, :] - query_positions[:, :, None]
        bias = self.block.self_attention.position_bias(
            relative, bidirectional=False,
            max_distance=self._config.relative_attention_max_distance)
        return bias, (relative <= 0)[:, None]

    def draft_logits_subset(self, states: tf.Tensor, lm_head: tf.Tensor,
                            lm_head_panels: Optional[tf.Tensor] = None) -> tf.Tensor:
        """Predicted features float32 [B, W, D] -> logits over the draft vocabulary
        float32 [B, W, N] through the target's LM head (columns `draft_vocab`)."""
        if self._config.rescales_states:
            states = states * (self._config.d_model ** -0.5)
        if lm_head_panels is not None:
            return kernels.matmul(states, lm_head_panels, self._config.draft_vocab_size)
        return tf.einsum("bwd,dn->bwn", states, lm_head)

    # ------------------------------------------------------------------------ decoding

    def prepare(self, prompt_ids, prompt_lengths, max_length):
        raise ValueError("a feature draft is prepared from its target's context "
                         "(prepare_with_target); tfspec.generate does that")

    def prepare_with_target(self, target, target_context, prompt_ids: tf.Tensor,
                            prompt_lengths: tf.Tensor, max_length: int
                            ) -> Tuple[FeatureDraftContext, FeatureDraftCache]:
        """The once-per-request work, from the target's prepared context.

        Args:
          target: the bound target.
          target_context: the target's `T5Context` (from its `prepare`).
          prompt_ids: int32 [B, S]; prompt_lengths: int32 [B] (unused: the target's encoder
            mask already says which prompt slots are real).
          max_length: static int, positions the cache holds.

        Returns:
          (FeatureDraftContext, FeatureDraftCache of zeros [B, H, max_length, d_kv]).
        """
        del prompt_lengths
        if target is not self.target:
            self.bind(target)
        c = self._config
        cache = kernels.readable_panel_cache(self)
        decode_entries = range(len(FeatureDraftPanels._fields))
        cross_keys = cross_values = None
        if c.cross_attention:
            states = tf.cast(target_context.encoder_states, tf.float32)
            # The panel cache's entry after the decode products (`_make_panel_cache`).
            kv_panels = kernels.amx_entry(cache, len(FeatureDraftPanels._fields), states)
            if kv_panels is None:
                cross_keys, cross_values = self.block.cross_attention.keys_values(states)
            else:  # As the target's own cross k | v: on AMX, the prompt's padding skipped.
                lengths = tf.reduce_sum(tf.cast(target_context.encoder_mask, tf.int32),
                                        axis=1)                             # left-aligned
                cross_keys, cross_values = self.block.cross_attention.keys_values_on_amx(
                    states, kv_panels, lengths)
        lm_head = target_context.lm_head
        if lm_head is None:
            lm_head = target.output_projection()
        context = FeatureDraftContext(cross_keys, cross_values, target_context.encoder_mask,
                                      self.lm_head_subset(lm_head))
        if cache is not None:
            context = context._replace(panels=FeatureDraftPanels(
                *[tf.convert_to_tensor(v) for v in cache.variables(decode_entries)]))
        batch = tf.shape(prompt_ids)[0]
        shape = [batch, c.num_heads, int(max_length), c.d_kv]
        return context, FeatureDraftCache(tf.zeros(shape), tf.zeros(shape))

    def decode(self, context: FeatureDraftContext, cache: FeatureDraftCache, ids: tf.Tensor,
               positions: tf.Tensor, features: tf.Tensor
               ) -> Tuple[tf.Tensor, tf.Tensor, FeatureDraftCache]:
        """One window of draft steps at per-row positions.

        Args:
          context, cache: from `prepare_with_target` or a previous `decode`.
          ids: int32 [B, W], the tokens at `positions`.
          positions: int32 [B, W], consecutive per row.
          features: float32 [B, W, D]: entry w is the feature of position positions[:, w] - 1
            in the draft's input space (`input_features` of the target's, or the draft's
            own prediction).

        Returns:
          (logits float32 [B, W, N] of the token after ids[:, w] over the draft vocabulary
          (`draft_vocab_ids`; N = V and all tokens without a reduced one), predicted features float32 [B, W, D] at `positions`, the cache with
          slots `positions` overwritten).
        """
        ids = tf.convert_to_tensor(ids, tf.int32)
        positions = tf.convert_to_tensor(positions, tf.int32)
        key_length = cache.keys.shape[2] or tf.shape(cache.keys)[2]
        batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
        heads = self._config.num_heads
        grid = [batch, heads, width]
        # (row, head, position) of every [d_kv] vector the window writes, as in `T5.decode`.
        write_indices = tf.stack([
            tf.broadcast_to(tf.range(batch)[:, None, None], grid),
            tf.broadcast_to(tf.range(heads)[None, :, None], grid),
            tf.broadcast_to(positions[:, None, :], grid)], axis=-1)
        bias, mask = self._bias(positions, key_length)
        panels = (context.panels if context.panels is not None
                  and kernel_applies(ids) else None)
        written = {}

        def self_attend(query, keys, values):
            keys = tf.tensor_scatter_nd_update(cache.keys, write_indices, keys)
            values = tf.tensor_scatter_nd_update(cache.values, write_indices, values)
            written["cache"] = FeatureDraftCache(keys, values)
            return attend(query, keys, values, bias, mask)

        states = self._block_step(features, ids, self_attend, context.cross_keys,
                                  context.cross_values, context.encoder_mask, panels)
        logits = self.draft_logits_subset(states, context.lm_head,
                                          None if panels is None else panels.lm_head)
        return logits, states, written["cache"]

    # ------------------------------------------------------------------------ checkpoint

    def weight_map(self):
        """{checkpoint name: (variable, transposed)}: the names of `model.safetensors`
        (the block's in HF's T5 layout under "block."; Linear kernels [out, in])."""
        mapping = {}
        if self.from_target is not None:
            mapping["from_target.weight"] = (self.from_target, True)
        mapping["fuse.weight"] = (self.fuse, True)
        mapping["feature_norm.weight"] = (self.feature_norm.weight, False)
        mapping["embedding_norm.weight"] = (self.embedding_norm.weight, False)
        for name, variable, transposed in self.block.hf_weights("block"):
            mapping[name] = (variable, transposed)
        mapping["final_norm.weight"] = (self.final_norm.weight, False)
        mapping["draft_vocab"] = (self.draft_vocab, False)
        return mapping

    # ---------------------------------------------------------------------------- panels

    def refresh_decode_panels(self) -> bool:
        """Makes or refreshes the kernel panels of the decode products (as
        `T5.refresh_decode_panels`); the LM head's are the bound target's columns."""
        if self._binding is None or not kernels.usable_outside_trace():
            return False
        cache = kernels.panel_cache(self, self._make_panel_cache)
        cache.refresh()
        return True

    def _make_panel_cache(self) -> "kernels.PanelCache":
        block = self.block
        attention, ffn = block.self_attention, block.ffn
        sources, variables = [], []

        def add(fn, *source_variables):
            sources.append(fn)
            variables.append(source_variables)

        # No source may reach `self`: the cache is the value of a table weakly keyed by it
        # (`kernels.panel_cache`), and a strong reference would keep it alive forever.
        fuse = self.fuse
        add(lambda: tf.convert_to_tensor(fuse), fuse)
        add(lambda: tf.concat([attention.q, attention.k, attention.v], axis=1),
            attention.q, attention.k, attention.v)
        add(lambda: tf.convert_to_tensor(attention.o), attention.o)
        if self._config.cross_attention:
            cross = block.cross_attention
            add(lambda: tf.convert_to_tensor(cross.q), cross.q)
            add(lambda: tf.convert_to_tensor(cross.o), cross.o)
        else:  # Stand-ins that no program reads (one panel of zeros each).
            add(lambda: tf.zeros([16, 16]), fuse)
            add(lambda: tf.zeros([16, 16]), fuse)
        add(ffn.input_kernel, *((ffn.wi_0, ffn.wi_1) if ffn.gated else (ffn.wi,)))
        add(lambda: tf.convert_to_tensor(ffn.wo), ffn.wo)
        head_fn, head_variables = self.target_lm_head_panel_source()
        add(head_fn, *head_variables)
        kinds = [kernels.ROWS] * len(sources)
        if kernels.amx_available() and self._config.cross_attention:
            # After the decode products (`FeatureDraftPanels`): the cross-attention k | v,
            # once per request over the prompt (`prepare_with_target`): on the embedded
            # pair 0.24 ms less per request of the bench pool than XLA's float32 dots.
            cross = block.cross_attention
            add(lambda: tf.concat([cross.k, cross.v], axis=1), cross.k, cross.v)
            kinds.append(kernels.AMX)
        return kernels.PanelCache(sources, variables, kinds)

    # -------------------------------------------------------------------------- training

    def rollout(self, target_features: tf.Tensor, decoder_input_ids: tf.Tensor,
                encoder_states: tf.Tensor, encoder_mask: tf.Tensor, depth: int = 1
                ) -> List[tf.Tensor]:
        """Uncached, differentiable: the draft's predicted features over a whole sequence,
        teacher-forced (pass 1) and on its own predictions (passes 2 .. depth).

        Pass 1 at position t reads the target's feature at t - 1 (zeros at t = 0) and the
        token at t: what a decode round's first step, and the catch-up, see. Pass s >= 2 at
        position t is draft step s - 1 of a round that started at n = t - s + 1: it reads
        pass s - 1's prediction at t - 1, and attends to the keys a decode round holds then,
        pass 1's at positions <= n and pass u + 1's at position n + u (EAGLE-3's
        training-time test). For example depth 3, t = 5: the query of pass 3 sees keys of
        pass 1 at positions 0..3, of pass 2 at 4 and of pass 3 at 5.

        Args:
          target_features: float32 [B, T, F], the target's features at positions 0..T-1.
          decoder_input_ids: int32 [B, T], the decoder start id then the sequence.
          encoder_states: [B, S, D], the target's encoder output; encoder_mask: bool [B, S].
          depth: passes (1 = teacher forcing only).

        Returns:
          depth tensors float32 [B, T, D]: pass s's predicted features at every position
          (positions t < s - 1 of pass s have no round and carry no meaning).
        """
        decoder_input_ids = tf.convert_to_tensor(decoder_input_ids, tf.int32)
        inputs = self.input_features(tf.cast(target_features, tf.float32))
        length = tf.shape(decoder_input_ids)[1]
        positions = tf.range(length)
        bias, _ = self._bias(positions[None], length)                       # [1, H, T, T]
        relative = positions[None, :] - positions[:, None]                  # key - query
        cross_keys = cross_values = None
        if self._config.cross_attention:
            cross_keys, cross_values = self.block.cross_attention.keys_values(
                tf.cast(encoder_states, tf.float32))

        def shifted(x):  # The feature of t - 1 at t; zeros at t = 0.
            return tf.pad(x, [[0, 0], [1, 0], [0, 0]])[:, :-1]

        passes, pass_keys, pass_values = [], [], []
        features = shifted(inputs)
        for s in range(1, depth + 1):

            def self_attend(query, keys, values, s=s):
                pass_keys.append(keys)
                pass_values.append(values)
                # Key j of query t comes from pass max(1, j - t + s) (see the docstring).
                source = tf.maximum(1, relative + s)                         # [T, T]
                visible = relative <= 0
                scores = []
                for u in range(1, s + 1):
                    score = tf.einsum("bhwd,bhld->bhwl", query, pass_keys[u - 1]) + bias
                    scores.append(tf.where((source == u) & visible, score, -1e9))
                # Each (t, j) is visible in at most one pass: the max picks it.
                probs = tf.nn.softmax(tf.reduce_max(tf.stack(scores), axis=0), axis=-1)
                return sum(tf.einsum("bhwl,bhld->bhwd",
                                     tf.where(source == u, probs, 0.0), pass_values[u - 1])
                           for u in range(1, s + 1))

            states = self._block_step(features, decoder_input_ids, self_attend, cross_keys,
                                      cross_values, encoder_mask)
            passes.append(states)
            features = shifted(states)
        return passes


class FeatureDraftAlone:
    """A feature draft decoding on its own, fed its own predicted features: a `DecodeModel`
    (`FeatureDraft.alone()`).

    What a draft step costs is what benchmarks need for c (the draft's cost per step
    relative to the target's); a feature draft has no standalone use otherwise. `prepare`
    runs the bound target's `prepare` (its encoder; the fixed cost a speculative request
    pays too) and the draft's; each one-token `decode` at position t reads the feature the
    step at t - 1 predicted (zeros at t = 0).
    """

    def __init__(self, draft: "FeatureDraft"):
        self.draft = draft

    vocab_size = property(lambda self: self.draft.vocab_size)
    eos_id = property(lambda self: self.draft.eos_id)
    pad_id = property(lambda self: self.draft.pad_id)
    decoder_start_id = property(lambda self: self.draft.decoder_start_id)
    max_prompt_length = property(lambda self: None)

    def refresh_decode_panels(self) -> bool:
        target = self.draft._bound()  # pylint: disable=protected-access
        refresh = getattr(target, "refresh_decode_panels", None)
        if refresh is not None:
            refresh()
        return self.draft.refresh_decode_panels()

    def prepare(self, prompt_ids, prompt_lengths, max_length):
        target = self.draft._bound()  # pylint: disable=protected-access
        target_context, _ = target.prepare(prompt_ids, prompt_lengths, max_length)
        context, cache = self.draft.prepare_with_target(target, target_context, prompt_ids,
                                                        prompt_lengths, max_length)
        features = tf.zeros([tf.shape(prompt_ids)[0], self.draft.config.d_model])
        return context, (cache, features)

    def decode(self, context, cache, ids, positions):
        draft_cache, features = cache
        if ids.shape[1] != 1:
            raise ValueError("a feature draft decodes alone one token at a time")
        logits, predicted, draft_cache = self.draft.decode(context, draft_cache, ids,
                                                           positions, features[:, None])
        # Decoded as a target (k = 0), so its logits cover all V (-inf outside the draft
        # vocabulary).
        return self.draft.scatter_logits(logits), (draft_cache, predicted[:, 0])
