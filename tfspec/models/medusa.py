"""`MedusaHeads`: drafts from the target's own last feature, all k at once (Medusa).

Medusa (Cai et al. 2024) puts k small heads on the target's final decoder state. Head i
predicts the token i positions beyond the one the target's own LM head predicts, so a whole
round's drafts come from one feature in one call: drafting needs no sequential draft model.

In the loop (`tfspec/decoding.py`), a round at committed length n starts from h_{n-1}, the
target's final decoder state at position n - 1 (handed over by the previous verify pass, as
for a feature draft: `tfspec/models/protocol.py`), and out[n], the row's last committed token,
which the target's head drew from h_{n-1}:

    x     = fuse([norm(h_{n-1}), norm(embed(out[n]))])   (or h_{n-1} itself: reads_token off)
    y_i   = x + W_out_i SiLU(W_in_i x)                    head i's residual block
    q_i   = softmax(LM_head(norm_i(y_i))) over the draft vocabulary, 0 elsewhere
    d_i   ~ q_i                                           the draft at position n + i

Worked example, k = 3, one row at n = 4 (out[4] = 9), h_3 from the last verify:

    propose   heads 1..3 on (h_3, 9)  -> q_1, q_2, q_3; d = [5, 2, 7] sampled (or argmax)
    verify    the target decodes [9, 5, 2, 7] @ 4..7 and hands over h_4 .. h_7
    accept    a = 1 (5), next token t = 3: the row commits [5, 3], n' = 6
    next      propose on (h_5, 3): h_{n'-1}, the state that drew the last committed token

Exact by default: q_i depends only on the prefix (h_{n-1} and out[n] are functions of it),
and d_i is drawn from q_i with the draft's own uniform, so the ordinary rule, min(1, p/q)
then the residual, keeps the target's distribution at every position although q_i ignores
d_1 .. d_{i-1} (any proposal distribution that is a function of the history is allowed).
Medusa's own "typical acceptance" is available only as a labelled opt-in (`tfspec.generate`'s
`acceptance=`); it is not distribution-preserving above temperature 0.

The heads own no embedding or LM head: they bind to their target (`TargetBoundDraft`) and
read the target's, restricted to a shared draft vocabulary of the N most frequent tokens if
`draft_vocab_size` < V (on a small target a full-vocabulary head per position costs more
than the target; q = 0 outside the vocabulary stays exact through the residual).

`reads_token` is our addition to Medusa-1's heads: they also read the embedding of out[n],
the token the target drew from h_{n-1}. At temperature 1 that token is random, and a head
that does not know it must spread q_1 over every token the target might have drawn.
"""

import dataclasses
from typing import NamedTuple, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from tfspec import kernels
from tfspec.models.t5_layers import RMSNorm, normal_initializer
from tfspec.models.target_binding import TargetBoundDraft, kernel_applies

ARCHITECTURE = "T5MedusaHeads"


def _matmul(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """x [..., K] @ kernel [K, N] -> [..., N], as one 2-D product.

    Not `tf.einsum("...k,kn->...n")`: TensorFlow's einsum gradient for a kernel without the
    ellipsis materialises the per-position outer products [..., K, N] before summing them
    (6 GB and 69 s for x [16, 256, 384] and a [384, 1024] kernel, against 0.07 s here),
    which made the Medusa stage run out of memory.
    """
    rows = tf.reshape(x, [-1, tf.shape(x)[-1]])
    out = tf.matmul(rows, kernel)
    return tf.reshape(out, tf.concat([tf.shape(x)[:-1], tf.shape(kernel)[-1:]], 0))


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
    """The shape of `MedusaHeads` (its `config.json`).

    Attributes:
      vocab_size: the target's V.
      d_model: the target's d_model (the feature space the heads read).
      heads: number of heads: the largest k they can draft.
      d_ff: hidden width of each head's residual block.
      reads_token: whether the heads also read the embedding of the last committed token.
      draft_vocab_size: N, the shared draft vocabulary (N = V: all of it).
      rescales_states: the target's `rescales_decoder_output` (tied v1.0 heads).
      target_fingerprint: `target_fingerprint(target)` of the target the heads were trained
        for; "" binds to any target of matching shapes (tests, fresh models).
      target_name: how to get that target (e.g. "zoo:tiny-code-target"), for messages.
    """

    vocab_size: int
    d_model: int
    heads: int = 4
    d_ff: int = 1024
    reads_token: bool = True
    draft_vocab_size: Optional[int] = None
    layer_norm_epsilon: float = 1e-6
    rescales_states: bool = False
    eos_token_id: Optional[int] = 1
    pad_token_id: int = 0
    decoder_start_token_id: int = 0
    target_fingerprint: str = ""
    target_name: str = ""

    def __post_init__(self):
        if self.heads < 1:
            raise ValueError(f"heads must be >= 1, got {self.heads}")
        if self.d_ff < 1:
            raise ValueError(f"d_ff must be >= 1, got {self.d_ff}")
        if self.draft_vocab_size is None:
            object.__setattr__(self, "draft_vocab_size", self.vocab_size)
        if not 1 <= self.draft_vocab_size <= self.vocab_size:
            raise ValueError(f"draft_vocab_size must be in [1, vocab_size = {self.vocab_size}], "
                             f"got {self.draft_vocab_size}")

    @property
    def feature_layers(self) -> Tuple[int, ...]:
        """The heads read the target's final decoder states only."""
        return (-1,)

    @classmethod
    def for_target(cls, target, **overrides) -> "MedusaConfig":
        """The config of heads for `target` (a `tfspec.models.T5`), with `overrides`."""
        c = target.config
        values = dict(vocab_size=c.vocab_size, d_model=c.d_model,
                      layer_norm_epsilon=c.layer_norm_epsilon,
                      rescales_states=c.rescales_decoder_output, eos_token_id=c.eos_token_id,
                      pad_token_id=c.pad_token_id,
                      decoder_start_token_id=c.decoder_start_token_id)
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict:
        return {"architectures": [ARCHITECTURE], "model_type": "tfspec_medusa",
                **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, values: dict) -> "MedusaConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields - {"architectures", "model_type", "dtype"})
        if unknown:
            raise ValueError(f"unknown Medusa config keys: {', '.join(unknown)}")
        return cls(**{k: v for k, v in values.items() if k in fields})


class MedusaPanels(NamedTuple):
    """The heads' products as `tfspec.kernels` panels (see `T5LayerPanels`)."""

    fuse: tf.Tensor                  # K = 2 D, N = D (a stand-in without reads_token)
    head_in: Tuple[tf.Tensor, ...]   # per head: K = D, N = d_ff
    head_out: Tuple[tf.Tensor, ...]  # per head: K = d_ff, N = D
    lm_head: tf.Tensor               # K = D, N = draft vocabulary


class MedusaContext(NamedTuple):
    """What `prepare_with_target` computes once per request (captured by the loop).

    Attributes:
      lm_head: float32 [D, N], the target's LM head restricted to the draft vocabulary.
      panels: `MedusaPanels` in a kernel program, or None (XLA's dots).
    """

    lm_head: tf.Tensor
    panels: Optional[MedusaPanels] = None


class MedusaHeads(TargetBoundDraft, keras.Model):
    """Medusa heads for a T5 target (see the module docstring).

    The loop drives them through the `FeatureDraft` extension of the protocol
    (`uses_target_features`, `bind`, `prepare_with_target`, `input_features`) plus
    `drafts_in_parallel = True`: instead of one `decode` per draft step, one `propose` gives
    a round's k distributions, and there is no draft cache to roll back or catch up.

    Args:
      config: a `MedusaConfig`.
      seed: seed of the random initialisation.
      initialize: "random" or "zeros" (a checkpoint overwrites every weight).
    """

    drafts_in_parallel = True
    KIND = "Medusa draft"
    RECIPE = ("python -m recipes.tiny_code.train --stage medusa with a config that has a "
              "medusa section, see tfspec/training/medusa.py")

    def __init__(self, config: MedusaConfig, seed: int = 0, *, initialize: str = "random",
                 name: str = "medusa_heads"):
        super().__init__(name=name, dtype="float32")
        self._config = config
        self.seed = seed
        self._binding = None
        self._alone: Optional["MedusaAlone"] = None
        self.tokenizer_path: Optional[str] = None
        rng = np.random.default_rng(seed) if initialize == "random" else None
        d, eps = config.d_model, config.layer_norm_epsilon

        def init(stddev):
            return "zeros" if rng is None else normal_initializer(rng, stddev)

        self.feature_norm = self.embedding_norm = self.fuse = None
        if config.reads_token:
            self.feature_norm = RMSNorm(d, eps, name="feature_norm")
            self.embedding_norm = RMSNorm(d, eps, name="embedding_norm")
            # [I; small noise]: a fresh head starts from the target's own state.
            fuse_init = "zeros"
            if rng is not None:
                values = np.concatenate([np.eye(d, dtype=np.float32),
                                         rng.standard_normal((d, d), np.float32)
                                         * np.float32(0.02 * d ** -0.5)])
                fuse_init = keras.initializers.Constant(values)
            self.fuse = self.add_weight(name="fuse", shape=(2 * d, d), initializer=fuse_init)
        self.head_in, self.head_out, self.head_norms = [], [], []
        for i in range(config.heads):
            self.head_in.append(self.add_weight(name=f"head_{i}_in", shape=(d, config.d_ff),
                                                initializer=init(d ** -0.5)))
            # Zero, as in Medusa: a fresh head is the identity before the LM head.
            self.head_out.append(self.add_weight(name=f"head_{i}_out",
                                                 shape=(config.d_ff, d), initializer="zeros"))
            self.head_norms.append(RMSNorm(d, eps, name=f"head_{i}_norm"))
        self.draft_vocab = self.add_weight(
            name="draft_vocab", shape=(config.draft_vocab_size,), dtype="int32",
            trainable=False,
            initializer=keras.initializers.Constant(np.arange(config.draft_vocab_size)))

    @property
    def heads(self) -> int:
        return self._config.heads

    def alone(self) -> "MedusaAlone":
        """The heads (bound) as a `DecodeModel` running one head per call (benchmarks' c)."""
        self._bound()
        if self._alone is None:
            self._alone = MedusaAlone(self)
        return self._alone

    def input_features(self, target_features: tf.Tensor) -> tf.Tensor:
        """The target's final decoder states float32 [B, T, D], unchanged."""
        return target_features

    def check_k(self, k: int) -> None:
        """Raises ValueError (one line) if the heads cannot draft `k` tokens per round."""
        if k > self._config.heads:
            raise ValueError(f"this Medusa draft has {self._config.heads} heads, so it drafts "
                             f"at most k = {self._config.heads} tokens per round; got k = {k}")

    # ------------------------------------------------------------------------ the heads

    @staticmethod
    def _product(x, panel, kernel, n_dim: int) -> tf.Tensor:
        """x float32 [..., K] @ a [K, n_dim] kernel: the panels in a kernel program."""
        if panel is not None:
            return kernels.matmul(x, panel, n_dim)
        return _matmul(x, kernel)

    def head_states(self, features: tf.Tensor, ids: tf.Tensor, num_heads: int,
                    panels: Optional[MedusaPanels] = None, first_head: int = 0) -> tf.Tensor:
        """The heads' states before the LM head.

        Args:
          features: float32 [B, W, D], the target's final decoder state at position t - 1.
          ids: int32 [B, W], the token at t (the one the target drew from that state).
          num_heads: static, heads first_head .. first_head + num_heads - 1 are run.
          panels: `MedusaPanels` in a kernel program, else None.
          first_head: static, the first head run.

        Returns:
          float32 [B, W, num_heads, D]: head i's state, whose logits give the token at t + i
          + 1 (i counted from first_head).
        """
        c = self._config
        x = tf.cast(features, tf.float32)
        if c.reads_token:
            x = tf.concat([self.feature_norm.normalize(x, tf.float32),
                           self.embedding_norm.normalize(self._embed(ids), tf.float32)], -1)
            x = self._product(x, None if panels is None else panels.fuse, self.fuse, c.d_model)
        states = []
        for i in range(first_head, first_head + num_heads):
            hidden = tf.nn.silu(self._product(x, None if panels is None else panels.head_in[i],
                                              self.head_in[i], c.d_ff))
            y = x + self._product(hidden, None if panels is None else panels.head_out[i],
                                  self.head_out[i], c.d_model)
            states.append(self.head_norms[i].normalize(y, tf.float32))
        return tf.stack(states, axis=2)

    def logits_subset(self, states: tf.Tensor, lm_head: tf.Tensor,
                      lm_head_panels: Optional[tf.Tensor] = None) -> tf.Tensor:
        """Head states float32 [..., D] -> logits over the draft vocabulary [..., N]."""
        if self._config.rescales_states:
            states = states * (self._config.d_model ** -0.5)
        if lm_head_panels is not None:
            return kernels.matmul(states, lm_head_panels, self._config.draft_vocab_size)
        return _matmul(states, lm_head)

    # ------------------------------------------------------------------------ decoding

    def prepare(self, prompt_ids, prompt_lengths, max_length):
        raise ValueError("Medusa heads are prepared from their target's context "
                         "(prepare_with_target); tfspec.generate does that")

    def prepare_with_target(self, target, target_context, prompt_ids: tf.Tensor,
                            prompt_lengths: tf.Tensor, max_length: int
                            ) -> Tuple[MedusaContext, tf.Tensor]:
        """The once-per-request work: the LM head's draft-vocabulary columns (and panels).

        Returns:
          (MedusaContext, cache float32 [B, 0]: the heads keep no cache).
        """
        del prompt_lengths, max_length
        if target is not self.target:
            self.bind(target)
        lm_head = target_context.lm_head
        if lm_head is None:
            lm_head = target.output_projection()
        context = MedusaContext(self.lm_head_subset(lm_head))
        cache = kernels.readable_panel_cache(self)
        if cache is not None:
            flat = [tf.convert_to_tensor(v) for v in cache.variables()]
            heads = self._config.heads
            context = context._replace(panels=MedusaPanels(
                flat[0], tuple(flat[1:1 + heads]), tuple(flat[1 + heads:1 + 2 * heads]),
                flat[-1]))
        return context, tf.zeros([tf.shape(prompt_ids)[0], 0], tf.float32)

    def propose(self, context: MedusaContext, last_ids: tf.Tensor, features: tf.Tensor,
                k: int) -> tf.Tensor:
        """A round's draft logits, all at once.

        Args:
          context: from `prepare_with_target`.
          last_ids: int32 [B], out[n], the row's last committed token.
          features: float32 [B, D], h_{n-1}, the target's final decoder state at n - 1.
          k: static, the round's drafts (<= heads).

        Returns:
          logits float32 [B, k, V]: entry i gives the draft at n + i + 1 (-inf outside the
          draft vocabulary).
        """
        self.check_k(k)
        ids = tf.convert_to_tensor(last_ids, tf.int32)[:, None]
        panels = (context.panels if context.panels is not None
                  and kernel_applies(ids, k) else None)
        states = self.head_states(features[:, None], ids, k, panels)[:, 0]      # [B, k, D]
        logits = self.logits_subset(states, context.lm_head,
                                    None if panels is None else panels.lm_head)
        return self.scatter_logits(logits)

    def decode(self, *args, **kwargs):
        raise ValueError("Medusa heads propose a round's drafts at once (propose); they do "
                         "not decode a window (tfspec.generate drives them)")

    # ------------------------------------------------------------------------ checkpoint

    def weight_map(self):
        """{checkpoint name: (variable, transposed)}: the names of `model.safetensors`
        (Linear kernels [out, in])."""
        mapping = {}
        if self._config.reads_token:
            mapping["fuse.weight"] = (self.fuse, True)
            mapping["feature_norm.weight"] = (self.feature_norm.weight, False)
            mapping["embedding_norm.weight"] = (self.embedding_norm.weight, False)
        for i in range(self._config.heads):
            mapping[f"heads.{i}.in.weight"] = (self.head_in[i], True)
            mapping[f"heads.{i}.out.weight"] = (self.head_out[i], True)
            mapping[f"heads.{i}.norm.weight"] = (self.head_norms[i].weight, False)
        mapping["draft_vocab"] = (self.draft_vocab, False)
        return mapping

    # ---------------------------------------------------------------------------- panels

    def refresh_decode_panels(self) -> bool:
        """Makes or refreshes the kernel panels of the heads' products (as
        `T5.refresh_decode_panels`); the LM head's are the bound target's columns."""
        if self._binding is None or not kernels.usable_outside_trace():
            return False
        cache = kernels.panel_cache(self, self._make_panel_cache)
        cache.refresh()
        return True

    def _make_panel_cache(self) -> "kernels.PanelCache":
        sources, variables = [], []

        def add(fn, *source_variables):
            sources.append(fn)
            variables.append(source_variables)

        # No source may reach `self` (see `FeatureDraft._make_panel_cache`).
        if self._config.reads_token:
            add(lambda fuse=self.fuse: tf.convert_to_tensor(fuse), self.fuse)
        else:  # A stand-in that no program reads.
            add(lambda: tf.zeros([16, 16]), self.draft_vocab)
        for weights in (self.head_in, self.head_out):
            for w in weights:
                add(lambda w=w: tf.convert_to_tensor(w), w)
        head_fn, head_variables = self.target_lm_head_panel_source()
        add(head_fn, *head_variables)
        return kernels.PanelCache(sources, variables)


class MedusaAlone:
    """Medusa heads decoding on their own: a `DecodeModel` (`MedusaHeads.alone()`) whose
    one-token `decode` runs the fuse and one head (head 0) on the carried feature.

    What benchmarks need is c, the draft's cost per drafted token relative to a target step.
    A round runs the fuse once and k heads in one call, so one head plus the fuse per token
    slightly overstates it. `prepare` runs the bound target's `prepare` (its encoder: the
    fixed cost a speculative request pays too); the feature stays zeros (the heads never see
    a target feature when decoding alone).
    """

    def __init__(self, heads: MedusaHeads):
        self.heads = heads

    vocab_size = property(lambda self: self.heads.vocab_size)
    eos_id = property(lambda self: self.heads.eos_id)
    pad_id = property(lambda self: self.heads.pad_id)
    decoder_start_id = property(lambda self: self.heads.decoder_start_id)
    max_prompt_length = property(lambda self: None)

    def refresh_decode_panels(self) -> bool:
        target = self.heads._bound()  # pylint: disable=protected-access
        refresh = getattr(target, "refresh_decode_panels", None)
        if refresh is not None:
            refresh()
        return self.heads.refresh_decode_panels()

    def prepare(self, prompt_ids, prompt_lengths, max_length):
        target = self.heads._bound()  # pylint: disable=protected-access
        target_context, _ = target.prepare(prompt_ids, prompt_lengths, max_length)
        context, _ = self.heads.prepare_with_target(target, target_context, prompt_ids,
                                                    prompt_lengths, max_length)
        return context, tf.zeros([tf.shape(prompt_ids)[0], self.heads.config.d_model])

    def decode(self, context, cache, ids, positions):
        del positions
        if ids.shape[1] != 1:
            raise ValueError("Medusa heads decode alone one token at a time")
        logits = self.heads.propose(context, ids[:, 0], cache, 1)
        return logits, cache
