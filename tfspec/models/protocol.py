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


class FeatureTarget(Protocol):
    """A target that can hand its features to a feature draft (`tfspec.models.T5` is one).

    Its `prepare` context carries `encoder_states` [B, S, D] and `encoder_mask` [B, S], which
    a feature draft cross-attends to, and `lm_head` float32 [D, V]; and it decodes with
    features as well as logits, in the same call:
    """

    def decode_with_features(self, context: Nest, cache: Nest, ids: tf.Tensor,
                             positions: tf.Tensor, feature_layers: Tuple[int, ...]
                             ) -> Tuple[tf.Tensor, Optional[tf.Tensor], Nest]:
        """`decode`, plus features float32 [B, W, F] at `positions` (None for no layers).

        Entry w of the features is the target's state at positions[:, w]: the state whose
        logits (entry w of the logits) give the token at positions[:, w] + 1.
        """


class FeatureDraft(DecodeModel, Protocol):
    """A draft that reads the target's features (EAGLE-style; `tfspec.models.FeatureDraft`).

    The extension, in full:

    - `uses_target_features = True`: the loop treats the draft as below; other drafts (T5,
      NGram, PromptLookup) do not have the attribute and are driven as before.
    - `feature_layers`: what the verify pass hands over (`FeatureTarget`).
    - `bind(target)`: `tfspec.generate` binds the draft to its target, and the draft may
      refuse one it was not trained for (one-line ValueError).
    - `prepare_with_target(target, target_context, prompt_ids, prompt_lengths, max_length)`
      replaces `prepare`: the draft builds its context from the target's (no encoder of its
      own).
    - `input_features(target_features [B, W, F]) -> [B, W, D]`: the target's features in the
      draft's input space, where its own predictions live too.
    - `decode(context, cache, ids, positions, features [B, W, D]) -> (logits, predicted
      features [B, W, D], cache)`: entry w reads the feature of position positions[:, w] - 1
      and the token at positions[:, w]; it predicts the feature at positions[:, w] and gives
      the logits of the next token.

    Which features the draft gets, in one round (n = the row's committed length, out[n] its
    last token, h_j the target's true feature at j, h^_j the draft's prediction of it):

        draft step 0   decode(out[n] @ n, h_{n-1})  -> q_1, h^_n     h_{n-1}: true, from
                                                                     the last verify
        draft step i   decode(d_i @ n + i, h^_{n+i-1}) -> q_{i+1}, h^_{n+i}
        verify         the target decodes [out[n], d_1 .. d_k] @ n .. n + k and hands
                       over h_n .. h_{n+k} with p_1 .. p_{k+1}: no extra target call
        accept         a drafts and the next token t; the row's new length n' = n + a + 1
        catch-up       decode([d_1 .. d_k] @ n + 1 .. n + k, [h_n .. h_{n+k-1}]): the
                       draft's cache is rewritten from the true features
        carried        h_{n'-1} = h_{n+a}, the next round's step 0 feature

    Worked example, k = 3, one row at n = 4 (out[4] = 9), the draft proposes d = [5, 2, 7]
    and the target accepts a = 1 (5) then draws t = 3:

        step 0   decode(9 @ 4, h_3)        writes slot 4 from (h_3, 9)
        step 1   decode(5 @ 5, h^_4)       writes slot 5 from (h^_4, 5): predicted feature
        step 2   decode(2 @ 6, h^_5)       writes slot 6 from (h^_5, 2)
        verify   [9, 5, 2, 7] @ 4..7       gives h_4 .. h_7
        catch-up [5, 2, 7] @ 5..7          rewrites slot 5 from (h_4, 5), the committed
                                           token with its true feature; slots 6, 7 get
                                           (h_5, 2), (h_6, 7), stale: past n' = 6
        next     decode(3 @ 6, h_5)        step 0 at n' = 6 rewrites slot 6 from (h_5, 3)
                                           before any query reads it

    So after every round the draft's cache holds, at every committed position j < n', the
    entry of (h_{j-1}, out[j]): what a draft run over the committed prefix with the target's
    features would hold, whatever was drafted and rejected. The target's features at
    committed positions are a function of the prefix, so q stays a function of the prefix
    and the draft's own random draws, which is all the rule needs to stay exact.
    """

    uses_target_features: bool
    feature_layers: Tuple[int, ...]

    def bind(self, target) -> "FeatureDraft":
        """Binds to `target` (raises ValueError for one the draft cannot serve)."""

    def prepare_with_target(self, target, target_context: Nest, prompt_ids: tf.Tensor,
                            prompt_lengths: tf.Tensor, max_length: int) -> Tuple[Nest, Nest]:
        """(context, cache) from the target's prepared context."""

    def input_features(self, target_features: tf.Tensor) -> tf.Tensor:
        """float32 [B, W, F] target features -> [B, W, D] draft input features."""


class DraftVocabulary(Protocol):
    """A draft whose `decode` scores only a draft vocabulary of N < V tokens.

    `draft_vocab_ids`: int32 [N] ascending token ids (None: the whole vocabulary, plain
    `decode`). With them, a draft's `decode` returns logits float32 [batch, window, N],
    column j scoring token draft_vocab_ids[j]. The loop (`decoding._draft_block`) then takes
    the argmax, applies the sampling transform and draws in those N columns, maps the drawn
    index to its token id, and lays the draft's probabilities out over V (0 outside the
    vocabulary) for the rule. `T5.set_draft_vocabulary` and `FeatureDraft` implement it.

    Worked example, V = 6, draft_vocab_ids = [1, 3, 4], one row, temperature 1:

        decode       logits [[0.2, 1.5, -0.3]]          over tokens 1, 3, 4
        transform    q_sub  [[0.20, 0.72, 0.08]]        softmax over N = 3 columns only
        draw         index 1 (uniform 0.5)   -> d = draft_vocab_ids[1] = 3
        for the rule q = [0, 0.20, 0, 0.72, 0.08, 0]    (a gather through the inverse map)

    Exactness is untouched: the rule is exact for any q drawn from with the draft's own
    uniforms; tokens 0, 2 and 5 still come out through the residual max(0, p - q). Only the
    acceptance rate can fall, by at most the target's mass outside the vocabulary.
    """

    draft_vocab_ids: Optional[Any]


class LiveWidth(Protocol):
    """A model whose `decode` can skip the tail of a window (`tfspec.models.T5` on CPU).

    `decodes_live_width = True`, and `decode(context, cache, ids, positions, live_width)`
    (and `decode_with_features(..., feature_layers, live_width)` for a `FeatureTarget`)
    takes int32 [batch] `live_width` in [0, W]: entries w < live_width[b] of row b must be
    exactly what they are without it; the other entries (their logits, features and the
    cache slots they write) may be anything. The loop (`decoding._live_kwargs`) passes 0
    for rows that have finished or (in a draft step) stopped drafting, and in adaptive mode
    1 + m_b for a row that drafted m_b < k, so rows cost what their live entries need, not
    the compiled window. Models without the attribute are called without the argument.

    Worked example, k = 4 (windows of 5), adaptive, three rows that drafted m = [2, 1, 0]
    (row 2 finished): live_width = [3, 2, 0]; the rule reads row 0's slots 0 .. 2 and row
    1's slots 0 .. 1; slots past them lie past the rows' new lengths n + a + 1 <= n + m + 1,
    so the cache entries written there are stale and are rewritten before any query reads
    them, and row 2 is never decoded again.
    """

    decodes_live_width: bool


class WindowedCache(Protocol):
    """A model that lays its cache out for the window width its decode calls will pass
    (`tfspec.models.T5`: the verify's self-attention keys).

    `prepares_windows = True`, and `prepare(prompt_ids, prompt_lengths, max_length,
    window=W)` takes the static width of every window this cache will be decoded with: the
    loop passes k + 1 to a speculative target and nothing (1) otherwise. Models without the
    attribute are prepared without it. Nothing about `decode` changes: the same window at
    the same positions gives the same logits whatever the layout, up to the summation order
    of the attention's dot products.

    Why: XLA:CPU's dot for a window of W > 1 queries [W, d_kv] against keys stored [L, d_kv]
    transposes the keys on every call (inside the embedded target's verify, k = 4, per
    `bench.loop_profile`: 31-50 us per score dot at L = 38, where the same dot in a loop of
    its own takes 4 us, 93-170 us at L = 262; `ynn::transpose` was ~7% of a 512-token
    request's `perf` samples). Keys stored [d_kv, L] are what that dot reads without a
    transpose (10-13 us at L = 38, 57 us at L = 262); a one-position step (the
    autoregressive target, a draft) reads [L, d_kv] as a vector-matrix product, which is
    faster there.

    Worked example, T5, k = 4, one row at n = 6 in a cache of L = 14 slots: the verify
    writes its five keys (each [d_kv]) as the columns 6 .. 10 of the [d_kv, 14] key matrix
    of every layer and head, in one in-place slice update; its values go to rows 6 .. 10
    of the [14, d_kv] value matrix as before. The window always fits: positions + W <= L,
    because the loop's buffer holds max_new_tokens + k + 2 slots and a row's window starts
    at its length <= max_new_tokens.
    """

    prepares_windows: bool


class TargetEncoderDraft(Protocol):
    """A token draft that reads its target's encoder output instead of running an encoder of
    its own (`tfspec.models.T5` with a target-encoder adapter: `T5.attach_target_encoder`).

    The extension, in full:

    - `reads_target_encoder = True`: the loop prepares the draft from the target's context
      (`decoding.decode_loop`); drafts without the attribute (or with it False) run
      `prepare` as before.
    - `bind(target)`: `tfspec.generate` binds the draft to its target; it refuses one it
      was not fitted to (one-line ValueError).
    - `prepare_with_target(target, target_context, prompt_ids, prompt_lengths, max_length)`
      replaces `prepare`: (context, cache) from the target's encoder output
      (`T5Context.encoder_states` [B, S, D_target], `encoder_mask` [B, S]).
    - `decode` is unchanged: a token draft.

    Why: a speculative request runs both encoders over the whole prompt bucket, and the
    draft's is pure overhead against autoregressive decoding: for the embedded pair 2 ms of
    a ~15 ms request at a 24-token prompt bucket, 13-15 ms of ~60 ms at 384 tokens, where
    the loop saves less than that on a 15-token answer (`bench.speedup` per prompt).

    Exactness: the draft's q at a position is a function of the prompt (through the target's
    encoder output, itself a function of the prompt), the committed prefix and the draft's
    own random draws, which is all the rule needs.

    Worked example, the embedded pair (target d_model 384, draft d_model 256), one row with
    a 20-token prompt in a 24-wide bucket: the target's `prepare` runs its encoder, giving
    encoder_states [1, 24, 384]; the draft's `prepare_with_target` multiplies them by its
    adapter [384, 256] into [1, 24, 256] and projects its cross-attention keys and values
    from those, as `prepare` would from its own encoder's [1, 24, 256]; the padded positions
    20 .. 23 stay masked by the target's encoder_mask.
    """

    reads_target_encoder: bool

    def bind(self, target) -> "TargetEncoderDraft":
        """Binds to `target` (raises ValueError for one the draft cannot serve)."""

    def prepare_with_target(self, target, target_context: Nest, prompt_ids: tf.Tensor,
                            prompt_lengths: tf.Tensor, max_length: int) -> Tuple[Nest, Nest]:
        """(context, cache) from the target's prepared context."""
