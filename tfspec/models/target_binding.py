"""What drafts that read their target's features share: binding, fingerprints, vocabularies.

A feature draft (`FeatureDraft`, EAGLE-style) and Medusa heads (`MedusaHeads`) own neither
an embedding nor an LM head: they are bound to a target (`bind`) and read the target's, so
no target weight is stored twice. Both are trained for one target and refuse any other
(`target_fingerprint`), and both may restrict q to a reduced draft vocabulary of the N most
frequent tokens (q = 0 elsewhere, -inf logits; exact, the residual max(0, p - q) still
reaches every token).

`TargetBoundDraft` is the mixin holding that behaviour. A model using it has `_config` (with
vocab_size, d_model, draft_vocab_size, feature_layers, the special ids, target_fingerprint
and target_name), an int32 variable `draft_vocab` [N] and `_binding`; it sets `KIND` (for
messages) and `RECIPE` (how to train one, for messages).
"""

import hashlib
import json
import weakref
from typing import Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tfspec import kernels
from tfspec.models.t5_config import T5Config


def target_fingerprint(target) -> str:
    """A short hash of a target's config, embedding and LM head: what a bound draft was
    trained on (the rest of the target shapes its features too, but two different trained
    targets never share these)."""
    digest = hashlib.sha256(json.dumps(target.config.to_dict(), sort_keys=True,
                                       default=str).encode())
    for tensor in (target.shared, target.output_projection()):
        digest.update(np.ascontiguousarray(np.asarray(tensor, np.float32)).tobytes())
    return digest.hexdigest()[:16]


# {target: fingerprint}; weak keys, so a dropped target frees its entry.
_FINGERPRINTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def cached_fingerprint(target) -> str:
    """`target_fingerprint`, computed once per target object."""
    value = _FINGERPRINTS.get(target)
    if value is None:
        value = _FINGERPRINTS[target] = target_fingerprint(target)
    return value


def draft_vocabulary(token_counts: np.ndarray, size: int,
                     always: Sequence[int] = ()) -> np.ndarray:
    """The `size` most frequent token ids (ties: lower id), always including `always`
    (e.g. EOS), sorted: int32 [size]."""
    order = np.lexsort((np.arange(len(token_counts)), -np.asarray(token_counts)))
    chosen = list(dict.fromkeys([int(i) for i in always] + [int(i) for i in order]))[:size]
    return np.sort(np.asarray(chosen, np.int32))


class Binding:
    """Holds the bound target outside Keras' attribute tracking (a tracked attribute would
    make the target's weights the draft's: trained, saved and counted twice)."""

    def __init__(self, target):
        self.target = target


class TargetBoundDraft:
    """Mixin of the drafts bound to a target (see the module docstring)."""

    uses_target_features = True
    KIND = "bound draft"
    RECIPE = "python -m recipes.tiny_code.train"

    # ------------------------------------------------------------------ protocol properties

    @property
    def config(self):
        return self._config

    @property
    def vocab_size(self) -> int:
        return self._config.vocab_size

    @property
    def eos_id(self) -> Optional[int]:
        return self._config.eos_token_id

    @property
    def pad_id(self) -> int:
        return self._config.pad_token_id

    @property
    def decoder_start_id(self) -> int:
        return self._config.decoder_start_token_id

    @property
    def max_prompt_length(self) -> Optional[int]:
        return None

    @property
    def feature_layers(self) -> Tuple[int, ...]:
        return self._config.feature_layers

    @property
    def full_vocabulary(self) -> bool:
        return self._config.draft_vocab_size == self._config.vocab_size

    # ---------------------------------------------------------------------------- binding

    @property
    def target(self):
        """The bound target, or None."""
        return None if self._binding is None else self._binding.target

    def check_target(self, target) -> None:
        """Raises ValueError (one line) unless this draft can draft for `target`."""
        c, t = self._config, getattr(target, "config", None)
        what = c.target_name or "the target it was trained for"
        if not isinstance(t, T5Config) or not hasattr(target, "decode_with_features"):
            raise ValueError(f"a {self.KIND} needs a T5 target that hands over its features; "
                             f"got {type(target).__name__}")
        if (t.vocab_size, t.d_model) != (c.vocab_size, c.d_model):
            raise ValueError(f"this {self.KIND} is for targets with vocab_size "
                             f"{c.vocab_size} and d_model {c.d_model} ({what}); the target "
                             f"has {t.vocab_size} and {t.d_model}")
        if any(layer >= t.num_decoder_layers for layer in c.feature_layers):
            raise ValueError(f"this {self.KIND} reads target decoder layers "
                             f"{list(c.feature_layers)}; the target has "
                             f"{t.num_decoder_layers}")
        if c.target_fingerprint and cached_fingerprint(target) != c.target_fingerprint:
            raise ValueError(f"this {self.KIND} was trained for {what} (fingerprint "
                             f"{c.target_fingerprint}); the target given is a different model "
                             f"({cached_fingerprint(target)}): pass that target, or train "
                             f"one for this target ({self.RECIPE})")

    def bind(self, target):
        """Binds the draft to `target` (checked by `check_target`); returns self.

        `tfspec.generate` binds the draft to the target it is given; rebinding to a
        different target drops the panels made for the old one.
        """
        if self.target is target:
            return self
        self.check_target(target)
        self._binding = Binding(target)
        kernels.drop_panel_cache(self)
        return self

    def _bound(self):
        if self._binding is None:
            raise ValueError(f"this {self.KIND} is not bound to a target: call "
                             "draft.bind(target) (tfspec.generate does it)")
        return self._binding.target

    # ------------------------------------------------------------------ draft vocabulary

    def _embed(self, ids: tf.Tensor) -> tf.Tensor:
        """int32 [B, T] -> float32 [B, T, D]: the target's embedding (no gradient into it)."""
        return tf.cast(tf.stop_gradient(tf.gather(self._bound().shared, ids)), tf.float32)

    def lm_head_subset(self, lm_head: tf.Tensor) -> tf.Tensor:
        """The target's LM head float32 [D, V] -> its draft-vocabulary columns [D, N]."""
        if self.full_vocabulary:
            return lm_head
        return tf.gather(lm_head, self.draft_vocab, axis=1)

    def scatter_logits(self, subset_logits: tf.Tensor) -> tf.Tensor:
        """float32 [..., N] -> [..., V] with -inf outside the draft vocabulary."""
        if self.full_vocabulary:
            return subset_logits
        shape = tf.shape(subset_logits)
        padded = tf.concat([subset_logits,
                            tf.fill(tf.concat([shape[:-1], [1]], 0), -float("inf"))], -1)
        # inverse[v] = v's index in the draft vocabulary, N (the -inf column) if absent.
        inverse = tf.tensor_scatter_nd_update(
            tf.fill([self._config.vocab_size], self._config.draft_vocab_size),
            tf.convert_to_tensor(self.draft_vocab)[:, None],
            tf.range(self._config.draft_vocab_size))
        return tf.gather(padded, inverse, axis=-1)

    def target_lm_head_panel_source(self):
        """(source fn, source variables) of the LM head panel: the bound target's LM head
        columns of the draft vocabulary (`kernels.PanelCache`)."""
        target = self._bound()
        head_variable = target.shared if target.lm_head is None else target.lm_head
        # Weak references: the source lives in this draft's panel cache, the value of a
        # table weakly keyed by the draft (`kernels.panel_cache`); strong ones would keep
        # the draft and its target alive forever.
        draft_ref, target_ref = weakref.ref(self), weakref.ref(target)
        return (lambda: draft_ref().lm_head_subset(target_ref().output_projection()),
                (head_variable, self.draft_vocab))


def kernel_applies(ids: tf.Tensor, width_multiplier: int = 1) -> bool:
    """Whether a [B, W] window's products go through `kernels.matmul` (as in `t5.py`);
    `width_multiplier` counts rows per window entry (Medusa: one per head)."""
    batch, width = ids.shape[0], ids.shape[1]
    return (batch is not None and width is not None
            and batch * width * width_multiplier <= kernels.MAX_ROWS and kernels.enabled())
