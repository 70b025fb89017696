"""The decoding loop: draft k, verify k + 1 in one target call, accept, commit; per row.

One `tf.while_loop` runs rounds until every row has finished. Each round, for every row
independently (n = the row's committed length, out[n] its last committed token):

  1. Draft: k one-token draft steps. Step i decodes out[n] (i = 0) or d_i at position
     n + i and samples d_{i+1} ~ q_{i+1}. A row stops drafting after it drafts EOS (what
     follows an EOS can never be emitted); the loop stops when every row has.
  2. Verify: the target decodes [out[n], d_1 .. d_k] at positions n .. n + k, giving
     p_1 .. p_{k+1} in one call.
  3. `acceptance.accept` returns a (leading accepted drafts) and the next token t.
  4. Commit: positions n+1 .. n+a+1 receive d_1 .. d_a, t; the row advances by a + 1
     (its own a: rows never move by the batch minimum), cut at the first EOS and at
     max_new_tokens.
  5. Draft catch-up: the draft writes d_k at position n + k into its cache (K/V only; its
     logits are not computed). Step 1 decoded d_1 .. d_{k-1} but only sampled d_k, so a row
     that accepted all k would otherwise start the next round with a hole at n + k.

Worked example, k = 3, two rows, start token s:

  before:   row 0 out = [s, 5, 8]        n = 2      row 1 out = [s, 4]  n = 1
  draft:    row 0 decodes 8@2, 3@3, 3@4  -> d = [3, 3, 9]
            row 1 decodes 4@1, 7@2, 2@3  -> d = [7, 2, 6]
  verify:   row 0 target window [8, 3, 3, 9] @ 2..5;  row 1 [4, 7, 2, 6] @ 1..4
  accept:   row 0 a = 1, t = 4                      row 1 a = 3, bonus t = 1 (EOS)
  after:    row 0 out = [s, 5, 8, 3, 4]  n = 4      row 1 out = [s, 4, 7, 2, 6, 1]  n = 5, done
  catch-up: row 0 draft writes 9@5 (stale: past n = 4; the next round's second draft
            step rewrites slot 5 before any query reads it); row 1 writes 6@4, its
            committed d_3.

Rollback is by masking: row 0's target cache still holds entries for its rejected drafts at
positions 4 and 5, but a query at position p only attends to slots <= p, and those slots
are rewritten before any later query can reach them. The same holds for the draft cache,
which after the catch-up holds every committed position < n + a + 1 of each row. Buffers are
sized max_new_tokens + k + 2 so that every fixed-width write stays in bounds, even for rows
that have finished (they keep computing garbage past their length, which is masked out).

Statistics stop at EOS: drafts after a drafted EOS (never drafted) or past an emitted EOS
(never able to matter) count neither as drafted nor as rejected.

Shapes are static (k, max_new_tokens and the sampling transform are Python constants), so
XLA compiles the whole loop once per (batch, prompt bucket, k, sampling) combination.
"""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import tensorflow as tf

from tfspec import acceptance as acceptance_lib
from tfspec import adaptive as adaptive_lib
from tfspec import rng
from tfspec import sampling as sampling_lib

# Random streams of one round (see `rng.uniform`).
_STREAM_DRAFT = 0
_STREAM_ACCEPT = 1
_STREAM_FINAL = 2


@dataclasses.dataclass(frozen=True)
class Adaptive:
    """The statics of adaptive draft length (`k="auto"`; see `decode_loop`).

    Attributes:
      confidence: a row stops drafting after a draft token whose draft probability q(d) is
        below this (0 disables the test).
      draft_cost: the horizon schedule. None: Hugging Face's `num_assistant_tokens` (+ 2
        after a fully accepted horizon, - 1 after a rejection). A float c: the walltime
        formula's best horizon for the row's running overlap, with c the cost of one more
        draft position (its draft step and its verify row) over a round's fixed cost
        (`_formula_horizon`).
    """

    confidence: float = 0.4
    draft_cost: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The statics of one compiled loop (changing any of them retraces).

    With `adaptive`, `k` is the compiled maximum k_max: each row drafts up to its own
    horizon (an input of the loop, adapted round by round) and stops early when unsure.
    """

    k: int
    max_new_tokens: int
    sampling: sampling_lib.Sampling
    eos_id: Optional[int]
    start_id: int
    adaptive: Optional[Adaptive] = None

    @property
    def buffer_length(self) -> int:
        # Position 0 (start) + max_new_tokens + the k + 1 scratch slots of the last round.
        return self.max_new_tokens + self.k + 2


class LoopState(NamedTuple):
    """Everything the while loop carries. Statics live in `LoopConfig`."""

    round_idx: tf.Tensor              # int32 [], rounds run so far
    out_ids: tf.Tensor                # int32 [batch, buffer_length]; [:, 0] = start token
    lengths: tf.Tensor                # int32 [batch], committed tokens = position of the last
    done: tf.Tensor                   # bool [batch], emitted EOS or reached max_new_tokens
    target_cache: Any                 # the target's nest, from `prepare`
    draft_cache: Any                  # the draft's nest, or () without a draft
    rounds: tf.Tensor                 # int32 [batch]
    drafted: tf.Tensor                # int32 [batch], drafts up to a drafted/emitted EOS
    accepted: tf.Tensor               # int32 [batch], accepted among those
    verified: tf.Tensor               # int32 [batch], judged by the rule among those
    accepted_per_position: tf.Tensor  # int32 [batch, k]
    beta_sum: tf.Tensor               # float32 [batch]
    horizon: tf.Tensor                # int32 [batch], drafts allowed next round, 1..k
                                      # (adaptive); k otherwise
    draft_features: tf.Tensor         # float32 [batch, D]: a feature draft's input feature
                                      # of position n - 1 (the target's, in the draft's
                                      # space; zeros at n = 0); [batch, 0] for other drafts


def uses_target_features(draft) -> bool:
    """Whether `draft` is a feature draft (`tfspec/models/protocol.py`): it reads the
    target's features, handed over by the verify pass."""
    return bool(getattr(draft, "uses_target_features", False))


def reads_target_encoder(draft) -> bool:
    """Whether `draft` builds its context from the target's encoder output
    (`TargetEncoderDraft` in `tfspec/models/protocol.py`) instead of running `prepare`."""
    return bool(getattr(draft, "reads_target_encoder", False))


def drafts_in_parallel(draft) -> bool:
    """Whether `draft` proposes a round's k drafts in one call (`MedusaHeads.propose`)
    instead of one decode per draft step; such a draft keeps no cache."""
    return bool(getattr(draft, "drafts_in_parallel", False))


def draft_vocabulary(draft) -> Optional[tf.Tensor]:
    """int32 [N] ascending, the token ids of a draft whose `decode` returns logits over a
    draft vocabulary (the `DraftVocabulary` extension of `tfspec/models/protocol.py`), or
    None (logits over all V)."""
    ids = getattr(draft, "draft_vocab_ids", None)
    return None if ids is None else tf.convert_to_tensor(ids, tf.int32)


def to_full_vocabulary(subset_probs: tf.Tensor, vocab_ids: tf.Tensor, vocab_size: int,
                       inverse: Optional[tf.Tensor] = None) -> tf.Tensor:
    """float32 [batch, N] probabilities over the draft vocabulary -> [batch, V], 0 elsewhere.

    A gather through the inverse map (not a scatter): inverse[v] = v's index in `vocab_ids`,
    or N, a zero column appended to the probabilities. Example, V = 5, ids = [1, 3]:
    inverse = [2, 0, 2, 1, 2]; [[0.7, 0.3]] -> [[0, 0.7, 0, 0.3, 0]]. `inverse`: the map of
    `vocabulary_inverse`, when a loop made it once for all its steps.
    """
    if inverse is None:
        inverse = vocabulary_inverse(vocab_ids, vocab_size)
    padded = tf.pad(subset_probs, [[0, 0], [0, 1]])                          # [batch, N + 1]
    return tf.gather(padded, inverse, axis=1)


def vocabulary_inverse(vocab_ids: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """int32 [V]: each token's index in the draft vocabulary `vocab_ids` (int32 [N]), or N
    for tokens outside it (see `to_full_vocabulary`)."""
    n = tf.shape(vocab_ids)[0]
    return tf.tensor_scatter_nd_update(tf.fill([vocab_size], n), vocab_ids[:, None],
                                       tf.range(n))


def _draft_step(draft, draft_context, cache, ids, positions, features, live=None):
    """One draft decode of a window: (logits [batch, W, V], features, cache).

    Feature drafts take and return features float32 [batch, W, D]; for other drafts
    `features` passes through unchanged (a [batch, 0] stand-in, so that both kinds carry
    loop variables of one static shape). `live`: bool [batch] or None, the rows whose
    entries are needed (`_live_kwargs`).
    """
    if uses_target_features(draft):
        return draft.decode(draft_context, cache, ids, positions, features)
    logits, cache = draft.decode(draft_context, cache, ids, positions,
                                 **_live_kwargs(draft, live, ids.shape[1]))
    return logits, features, cache


def _prepare(model, prompt_ids, prompt_lengths, length: int, window: int):
    """`model.prepare`, told the static width of the windows it will decode when it lays
    its cache out for them (`WindowedCache` in protocol.py)."""
    if window > 1 and getattr(model, "prepares_windows", False):
        return model.prepare(prompt_ids, prompt_lengths, length, window=window)
    return model.prepare(prompt_ids, prompt_lengths, length)


def _live_kwargs(model, live, width: int, live_width=None) -> dict:
    """The `live_width` argument for a model that takes it (`LiveWidth` in protocol.py),
    else nothing: int32 [batch], `live_width` (default: the whole window, `width`) for live
    rows and 0 for the others, so that rows that have finished or stopped drafting cost
    nothing in the products. What those rows get back is unspecified, and is never read:
    their logits are discarded and their cache slots lie past their lengths."""
    if live is None or not getattr(model, "decodes_live_width", False):
        return {}
    if live_width is None and live.shape[0] == 1:
        # A lone row is live whenever the loop calls the model (the loops end when it
        # stops): nothing to skip, and the operand's per-product cost (~3% of a sampled
        # draft step at batch 1, measured) would buy nothing.
        return {}
    return {"live_width": tf.where(live, width if live_width is None else live_width, 0)}


def _gather_rows(values: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """values [batch, L], index [batch] -> [batch]: values[b, index[b]]."""
    return tf.gather(values, index, batch_dims=1)


def _gather_rows_nd(values: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """values [batch, L, D], index [batch] -> [batch, D]: values[b, index[b]]."""
    return tf.gather(values, index, axis=1, batch_dims=1)


def _draft_block(draft, draft_context, draft_cache, last_ids, n, done, horizon, keys,
                 round_idx, config: LoopConfig, draft_sample_fn, features):
    """Steps 1-2 of the round: up to k draft tokens and the distributions they were drawn from.

    Draft step i (0-based) decodes one token at position n + i: out[n] for i = 0, d_i after
    that, and gives q_{i+1}. The draft cache already holds every committed position < n
    (see `_draft_catch_up`), so every step is one token wide: on XLA:CPU a one-row step is a
    vector-matrix product, a two-row window costs several times more (measured).

    Drafting stops early for a row once it has drafted EOS (or has finished): nothing after
    a drafted EOS can be emitted, because an accepted EOS ends the row and a rejection
    before it discards the rest. The loop ends when every row has stopped; positions not
    drafted hold EOS with a one-hot distribution, which the rule treats like any draft.

    Adaptive mode (`config.adaptive`) also stops a row after its `horizon[b]`-th draft, or
    after a draft d with q(d) < `confidence`: the row then has m_b < k drafts, and the rule
    must not judge the positions past m_b (see `decode_loop` for why this stays exact). Rows
    that stopped keep computing (the step is batched) into cache slots past their drafts,
    which are stale slots under the cache invariant.

    Args:
      last_ids: int32 [batch], out[n].
      n: int32 [batch], committed lengths.
      done: bool [batch], finished rows.
      horizon: int32 [batch], each row's draft budget (adaptive mode; else ignored).
      features: float32 [batch, D], a feature draft's input feature of position n - 1 (the
        target's true feature, from the last verify); [batch, 0] for other drafts. Step
        i >= 1 of a feature draft reads the feature step i - 1 predicted instead.

    Returns:
      (draft_ids int32 [batch, k], draft_probs float32 [batch, k, V] or None in greedy mode,
      drafted int32 [batch] (m_b: drafts before the row stopped; 0 for finished rows; k in
      fixed mode, where the EOS rule above makes counting unnecessary), draft_cache).
    """
    if drafts_in_parallel(draft):
        return _parallel_draft_block(draft, draft_context, draft_cache, last_ids, done,
                                     horizon, keys, round_idx, config, draft_sample_fn,
                                     features)
    k = config.k
    greedy = config.sampling.greedy
    eos_id = config.eos_id
    adaptive = config.adaptive
    # The confidence test is the only reader of q(d); without it no V-wide work is added.
    stops_when_unsure = adaptive is not None and adaptive.confidence > 0
    vocab_size = draft.vocab_size
    # With a draft vocabulary (ids [N]), logits, the argmax, the transform and the sampling
    # are N wide; only the probabilities handed to the rule are laid out over V.
    vocab_ids = draft_vocabulary(draft)
    # Made once per round, outside the draft steps' while loop (loop-invariant).
    inverse = (None if vocab_ids is None or greedy
               else vocabulary_inverse(vocab_ids, vocab_size))
    uniforms = None if greedy else rng.uniform(keys, round_idx, _STREAM_DRAFT, k)
    filler = eos_id if eos_id is not None else 0
    batch = tf.shape(n)[0]

    def token_of(index):
        return index if vocab_ids is None else tf.gather(vocab_ids, index)

    def choose(logits, i):
        """logits [batch, V or N] -> (token [batch], probs [batch, V] or None, confidence)."""
        if greedy:  # The one-hot distribution is implied by the argmax; skip V-wide work.
            token = token_of(sampling_lib.argmax(logits))
            if not stops_when_unsure:
                return token, None, None
            # The draft's own probability of its argmax: exp(max - logsumexp).
            confidence = tf.exp(tf.reduce_max(logits, axis=-1)
                                - tf.reduce_logsumexp(logits, axis=-1))
            return token, None, confidence
        probs = sampling_lib.logits_to_probs(logits, config.sampling)
        index = draft_sample_fn(probs, tf.gather(uniforms, i, axis=1))
        confidence = (tf.gather(probs, index, axis=1, batch_dims=1) if stops_when_unsure
                      else None)
        if vocab_ids is not None:
            probs = to_full_vocabulary(probs, vocab_ids, vocab_size, inverse)
        return token_of(index), probs, confidence

    # Step-major buffers [k, batch(, V)]: step i writes row i in place (a one-index scatter
    # on the leading axis is a dynamic-update-slice, no copy of the buffer).
    ids_buf = tf.fill([k, batch], tf.constant(filler, tf.int32))
    probs_buf = (() if greedy else
                 tf.one_hot(ids_buf, vocab_size, dtype=tf.float32))

    def step(i, token, stopped, drafted, cache, ids_buf, probs_buf, features):
        # Rows that stopped drafting keep stepping (the step is batched) into stale slots;
        # their products are skipped.
        logits, features, cache = _draft_step(draft, draft_context, cache, token[:, None],
                                              (n + i)[:, None], features[:, None], ~stopped)
        features = features[:, 0]
        token, probs, confidence = choose(logits[:, 0], i)
        ids_buf = tf.tensor_scatter_nd_update(ids_buf, [[i]], token[None])
        if not greedy:
            probs_buf = tf.tensor_scatter_nd_update(probs_buf, [[i]], probs[None])
        if adaptive is not None:
            # Rows still drafting at step i drafted d_{i+1}; then each decides whether to
            # draft d_{i+2} from its own budget and its own q (never from the target).
            drafted += tf.cast(~stopped, tf.int32)
            stopped |= drafted >= horizon
            if stops_when_unsure:
                stopped |= confidence < adaptive.confidence
        if eos_id is not None:
            stopped |= tf.equal(token, eos_id)
        return i + 1, token, stopped, drafted, cache, ids_buf, probs_buf, features

    def keep_drafting(i, token, stopped, *_):
        del token
        return (i < k) & ~tf.reduce_all(stopped)

    # A while loop (not a Python loop) keeps one copy of the draft in the compiled program.
    _, _, _, drafted, draft_cache, ids_buf, probs_buf, _ = tf.while_loop(
        keep_drafting, step,
        (tf.constant(0), last_ids, done, tf.zeros([batch], tf.int32), draft_cache, ids_buf,
         probs_buf, features),
        maximum_iterations=k)
    draft_ids = tf.transpose(ids_buf, [1, 0])                                # [batch, k]
    draft_probs = None if greedy else tf.transpose(probs_buf, [1, 0, 2])     # [batch, k, V]
    if adaptive is None:
        drafted = tf.fill([batch], k)
    return draft_ids, draft_probs, drafted, draft_cache


def _parallel_draft_block(draft, draft_context, draft_cache, last_ids, done, horizon, keys,
                          round_idx, config: LoopConfig, draft_sample_fn, features):
    """`_draft_block` for a draft that proposes all k at once (Medusa heads).

    One `propose` call gives q_1 .. q_k from the row's carried feature h_{n-1} and out[n];
    d_i is drawn from q_i with the same per-step uniform `_draft_block` would use (or is
    its argmax, greedy). No draft position depends on an earlier draft, so nothing is
    sequential and there is no cache to advance.

    Adaptive mode: a row drafts m = its horizon, cut after its first draft whose q(d) is
    below the confidence threshold or that is EOS (0 for finished rows): the decisions
    `_draft_block` makes, from the draft's own distributions and draws only.

    Returns:
      As `_draft_block`: (draft_ids int32 [batch, k], draft_probs float32 [batch, k, V] or
      None (greedy), drafted int32 [batch], draft_cache unchanged).
    """
    k = config.k
    adaptive = config.adaptive
    stops_when_unsure = adaptive is not None and adaptive.confidence > 0
    logits = draft.propose(draft_context, last_ids, features, k)              # [batch, k, V]
    batch = tf.shape(last_ids)[0]
    if config.sampling.greedy:
        draft_ids = sampling_lib.argmax(logits)                              # [batch, k]
        draft_probs = None
        if stops_when_unsure:
            confidence = tf.exp(tf.reduce_max(logits, axis=-1)
                                - tf.reduce_logsumexp(logits, axis=-1))
    else:
        draft_probs = sampling_lib.logits_to_probs(logits, config.sampling)   # [batch, k, V]
        uniforms = rng.uniform(keys, round_idx, _STREAM_DRAFT, k)             # [batch, k]
        # The sampler works on rows: the k positions become k * batch rows.
        flat_ids = draft_sample_fn(tf.reshape(draft_probs, [-1, draft.vocab_size]),
                                   tf.reshape(uniforms, [-1]))
        draft_ids = tf.reshape(flat_ids, [batch, k])
        if stops_when_unsure:
            confidence = tf.gather(draft_probs, draft_ids, axis=2, batch_dims=2)
    if adaptive is None:
        return draft_ids, draft_probs, tf.fill([batch], k), draft_cache
    stop_after = tf.zeros([batch, k], tf.bool)
    if stops_when_unsure:
        stop_after |= confidence < adaptive.confidence
    if config.eos_id is not None:
        stop_after |= tf.equal(draft_ids, config.eos_id)
    first_stop = tf.where(tf.reduce_any(stop_after, axis=1),
                          tf.argmax(tf.cast(stop_after, tf.int32), axis=1,
                                    output_type=tf.int32) + 1, k)
    drafted = tf.where(done, 0, tf.minimum(horizon, first_stop))
    return draft_ids, draft_probs, drafted, draft_cache


def _draft_catch_up(draft, draft_context, draft_cache, draft_ids, n, drafted=None,
                    verified_features=None, live=None):
    """Writes d_k into the draft cache at position n + k (a feature draft: d_1 .. d_k at
    n + 1 .. n + k, from the target's true features).

    The draft decoded d_1 .. d_{k-1} during the round but only *sampled* d_k, so its cache
    lacks position n + k. A row that accepted every draft commits d_k there (and the bonus
    token at n + k + 1, which the next round's first step writes). For every other row the
    write lands at or past its new length n + a + 1 <= n + k: a stale slot that the next
    round overwrites before any query reads it (the protocol's cache invariant).

    Why unconditional: the logits are discarded, so XLA drops everything that only feeds
    them (the LM head and the last layer's attention and feed-forward blocks, leaving its
    key/value projections); what remains costs a few microseconds for the embedded draft
    (`bench.round_breakdown`: catch_up_ms). A `tf.cond` that ran it only for fully accepted rounds made XLA copy the
    whole draft cache in both branches (seen in the HLO dump), which cost more.

    In adaptive mode a row with m < k drafts needs d_m at n + m instead (it may have accepted
    all m); its steps past m, if the batch kept drafting, wrote only stale slots.

    A feature draft wrote positions n + 1 .. n + k - 1 from its own *predicted* features.
    For the committed ones that is not what a draft that saw the true prefix holds, so the
    catch-up rewrites all k: slot n + j from (h_{n+j-1}, d_j), the target's verified feature
    and the draft token, one k-wide window whose logits are discarded. Slots past the new
    length n + a + 1 get stale entries (as above, and in adaptive mode whatever the row
    drafted past m), rewritten before any query reads them. Worked example, k = 3, a = 1:

      round:    step 0 writes n from (h_{n-1}, out[n]), steps 1-2 write n+1, n+2 from
                (h^_n, d_1), (h^_{n+1}, d_2), predicted features h^
      verify:   the target gives h_n, h_{n+1}, h_{n+2}, h_{n+3}; a = 1, next token t
      catch-up: writes n+1 .. n+3 from (h_n, d_1), (h_{n+1}, d_2), (h_{n+2}, d_3)
      next:     step 0 at n' = n + 2 reads h_{n+1} and t, rewriting slot n + 2 first

    Args:
      draft_ids: int32 [batch, k].
      n: int32 [batch], committed lengths before the round.
      drafted: int32 [batch], each row's m (adaptive mode), or None: every row drafted k.
      verified_features: float32 [batch, k + 1, D], the target's features at n .. n + k in
        the draft's input space (feature drafts), or None.
      live: bool [batch], the rows that had not finished before the round, or None (all):
        finished rows' writes are skipped where the draft can (`_live_kwargs`).

    Returns:
      The draft cache.
    """
    k = draft_ids.shape[1]
    if verified_features is not None:
        positions = n[:, None] + 1 + tf.range(k)[None, :]
        _, _, cache = draft.decode(draft_context, draft_cache, draft_ids, positions,
                                   verified_features[:, :k])
        return cache
    if drafted is None:
        last_ids, last_positions = draft_ids[:, k - 1:], (n + k)[:, None]
    else:
        # Finished rows have m = 0; index 0 keeps the gather in bounds (their slots are
        # never read again).
        last = tf.maximum(drafted - 1, 0)
        last_ids = _gather_rows(draft_ids, last)[:, None]
        last_positions = (n + last + 1)[:, None]
    _, cache = draft.decode(draft_context, draft_cache, last_ids, last_positions,
                            **_live_kwargs(draft, live, 1))
    return cache


def _verify(target, target_context, target_cache, window_ids, positions, draft_ids,
            draft_probs, keys, round_idx, config: LoopConfig, accept_fn, drafted=None,
            feature_layers=(), live=None):
    """Steps 3-4 of the round: one target call over k + 1 positions, then the rule.

    Adaptive mode: a row with m < k drafts is judged on its first m only. The rule runs on
    all k (its slots past m hold stale drafts); where it accepted at least m, the result is
    cut to m accepted and the next token is drawn from p_{m+1}, the target's distribution
    after the last real draft, with the round's final uniform (which the discarded result
    would have used, so it is still independent of everything that led here). Where it
    accepted fewer than m, it judged only real drafts and stands.

    Args:
      window_ids: int32 [batch, k + 1], [out[n], d_1 .. d_k].
      positions: int32 [batch, k + 1], n .. n + k.
      draft_ids: int32 [batch, k] or None (k = 0).
      draft_probs: float32 [batch, k, V], or None (k = 0 or greedy).
      drafted: int32 [batch], each row's m (adaptive mode), or None.
      feature_layers: the target features a feature draft reads (empty: none).
      live: bool [batch], the rows that have not finished, or None (all).

    Returns:
      (num_accepted int32 [batch], next_ids int32 [batch], beta float32 [batch, k] or None,
      target_cache, features float32 [batch, k + 1, F] at positions n .. n + k or None).
    """
    # A target that can skip entries (`LiveWidth` in protocol.py) computes, per row, only
    # what the rule reads: slots 0 .. m_b of a live row (all k + 1 at a fixed k; 1 + m_b in
    # adaptive mode, so a row that stopped drafting early costs what its drafts need) and
    # nothing of a finished row. The cache slots left unspecified lie past each live row's
    # new length n + a + 1 <= n + m_b + 1 (stale slots under the cache invariant), or belong
    # to a finished row, which is never decoded again.
    live_width = None if drafted is None else drafted + 1
    target_logits, features, target_cache = _target_window(
        target, target_context, target_cache, window_ids, positions, feature_layers,
        _live_kwargs(target, live, window_ids.shape[1], live_width))
    result = _judge(target_logits, draft_ids, draft_probs, keys, round_idx, config,
                    accept_fn, drafted, draft_vocabulary(target))
    return result + (target_cache, features)


def _target_window(target, target_context, target_cache, window_ids, positions,
                   feature_layers, live_kwargs: dict):
    """One target call over a window: (logits [batch, W, V], features [batch, W, F] or
    None, target_cache). `live_kwargs`: from `_live_kwargs`, passed on."""
    if feature_layers:
        # The feature hand-off: the same target call gives the features, no extra pass.
        return target.decode_with_features(target_context, target_cache, window_ids,
                                           positions, feature_layers, **live_kwargs)
    logits, target_cache = target.decode(target_context, target_cache, window_ids, positions,
                                         **live_kwargs)
    return logits, None, target_cache


def _judge(target_logits, draft_ids, draft_probs, keys, round_idx, config: LoopConfig,
           accept_fn, drafted, vocab_ids=None):
    """The rule on the verify's logits: (num_accepted, next_ids, beta) as in `_verify`.

    `vocab_ids` (int32 [N]): the decoding model has a draft vocabulary and decodes alone
    (k = 0; what benchmarks time a draft by), so its logits cover those N tokens.
    """
    k = config.k
    if vocab_ids is not None:
        if k:
            raise ValueError("a target with a draft vocabulary decodes only autoregressively")
        if config.sampling.greedy:
            next_ids = tf.gather(vocab_ids, sampling_lib.argmax(target_logits[:, 0]))
        else:
            final_uniforms = rng.uniform(keys, round_idx, _STREAM_FINAL, 1)[:, 0]
            next_ids = tf.gather(vocab_ids, sampling_lib.sample_categorical(
                sampling_lib.logits_to_probs(target_logits[:, 0], config.sampling),
                final_uniforms))
        return tf.zeros_like(next_ids), next_ids, None
    if config.sampling.greedy:
        # Greedy is the general rule on one-hot distributions; working on argmax ids avoids
        # V-wide softmax/cumsum passes, which dominate the rounds of small models.
        target_ids = sampling_lib.argmax(target_logits)                      # [batch, k+1]
        if k == 0:
            return tf.zeros_like(target_ids[:, 0]), target_ids[:, 0], None
        result = acceptance_lib.accept_greedy(target_ids, draft_ids)
        if drafted is not None:
            capped = result.num_accepted >= drafted
            return (tf.minimum(result.num_accepted, drafted),
                    tf.where(capped, _gather_rows(target_ids, drafted), result.next_ids),
                    result.beta)
    else:
        target_probs = sampling_lib.logits_to_probs(target_logits, config.sampling)
        final_uniforms = rng.uniform(keys, round_idx, _STREAM_FINAL, 1)[:, 0]
        if k == 0:
            next_ids = sampling_lib.sample_categorical(target_probs[:, 0], final_uniforms)
            return tf.zeros_like(next_ids), next_ids, None
        accept_uniforms = rng.uniform(keys, round_idx, _STREAM_ACCEPT, k)
        result = accept_fn(target_probs, draft_probs, draft_ids, accept_uniforms,
                           final_uniforms)
        if drafted is not None:
            capped = result.num_accepted >= drafted
            after_last = tf.gather(target_probs, drafted, axis=1, batch_dims=1)   # [batch, V]
            return (tf.minimum(result.num_accepted, drafted),
                    tf.where(capped, sampling_lib.sample_categorical(after_last,
                                                                     final_uniforms),
                             result.next_ids),
                    result.beta)
    return result.num_accepted, result.next_ids, result.beta


def _next_horizon(horizon, drafted, num_accepted, live, k: int):
    """Hugging Face's `num_assistant_tokens` schedule, per row (all int32 [batch]).

    + 2 after a round that drafted and accepted the whole horizon, - 1 after a rejection,
    unchanged after an early stop whose drafts were all accepted; kept in [1, k].
    """
    all_accepted = num_accepted >= drafted
    grown = tf.where(all_accepted & (drafted >= horizon), horizon + 2,
                     tf.where(all_accepted, horizon, horizon - 1))
    return tf.where(live, tf.clip_by_value(grown, 1, k), horizon)


def _formula_horizon(beta_sum, verified, horizon, live, k: int, draft_cost: float):
    """The walltime formula's best horizon per row, from the row's running overlap.

    A round drafting h tokens at per-position overlap a emits E(h) = 1 + a + ... + a^h
    tokens on average and costs 1 + h c (in rounds without drafts), so the horizon is
    argmax over h in [1, k] of E(h) / (1 + h c), with a the row's mean overlap so far
    (beta_sum / verified, shrunk towards `adaptive.PRIOR_OVERLAP` by one position's worth,
    so a request's own rounds soon decide). Only past rounds decide it, so the output
    distribution is unchanged (see `decode_loop`). `adaptive.formula_horizon` is the same
    for one overlap.

    Worked example, k = 4, c = 0.35: a = 0.95 -> E = [1.95, 2.85, 3.71, 4.52] / [1.35, 1.7,
    2.05, 2.4] = [1.44, 1.68, 1.81, 1.88] -> 4; a = 0.65 -> E = [1.65, 2.07, 2.35, 2.53] /
    the same = [1.222, 1.219, 1.145, 1.052] -> 1.

    Args:
      beta_sum: float32 [batch], the summed overlap of every verified position so far.
      verified: int32 [batch], those positions.
      horizon: int32 [batch], the current horizons (kept for rows that are not live).
      live: bool [batch].
      k: the compiled maximum.
      draft_cost: c above.

    Returns:
      int32 [batch] in [1, k].
    """
    prior = adaptive_lib.PRIOR_OVERLAP * adaptive_lib.PRIOR_POSITIONS
    overlap = ((beta_sum + prior)
               / (tf.cast(verified, tf.float32) + adaptive_lib.PRIOR_POSITIONS))  # [batch]
    overlap = tf.clip_by_value(overlap, 0.0, 1.0)
    exponents = tf.range(k + 1, dtype=tf.float32)                             # [k+1]
    expected = tf.cumsum(tf.pow(overlap[:, None], exponents[None, :]), axis=1)[:, 1:]
    cost = 1.0 + draft_cost * exponents[1:]                                   # [k]
    best = tf.argmax(expected / cost[None, :], axis=1, output_type=tf.int32) + 1
    return tf.where(live, best, horizon)


def _round_horizon(state, drafted, num_accepted, live, verified_now, beta_now, k: int,
                   settings: Adaptive):
    """int32 [batch]: every row's horizon for the next round, by `settings.draft_cost`'s
    schedule (this round's verified positions and overlap included)."""
    if settings.draft_cost is None:
        return _next_horizon(state.horizon, drafted, num_accepted, live, k)
    live_f = tf.cast(live, tf.float32)
    return _formula_horizon(state.beta_sum + live_f * beta_now,
                            state.verified + tf.cast(live, tf.int32) * verified_now,
                            state.horizon, live, k, float(settings.draft_cost))


def decode_loop(target, draft, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                row_keys: tf.Tensor, seed: tf.Tensor, config: LoopConfig,
                accept_fn: Callable = acceptance_lib.accept,
                draft_sample_fn: Callable = sampling_lib.sample_categorical,
                horizons: Optional[tf.Tensor] = None):
    """Runs the speculative (k > 0) or autoregressive (k = 0) loop.

    Adaptive draft length (`config.adaptive`, `k="auto"`): k is the compiled maximum. Each
    row carries a horizon h_b in [1, k] (`horizons` at the start) and drafts m_b <= h_b
    tokens: it stops after its h_b-th draft, after a draft whose own probability q(d) is
    below the confidence threshold, or after a drafted EOS. The draft while loop ends when
    every row has stopped; the verify window stays k + 1 wide (static shapes), the rule
    judges each row's first m_b drafts only (`_verify`), and a target that can skip
    entries (`LiveWidth` in protocol.py: T5 through the CPU kernel) computes only each
    row's first 1 + m_b, so a round costs what its drafts need. After the round the horizon
    moves by the schedule of `Adaptive.draft_cost`: the walltime formula's best horizon for
    the row's running overlap (`_formula_horizon`), or Hugging Face's schedule for
    `num_assistant_tokens` (+ 2 when all h_b drafts were accepted, - 1 after a rejection,
    unchanged when the row stopped early and all its m_b drafts were accepted).

    Why the output distribution is unchanged: given everything that happened before a
    position (tokens and random draws alike), the rule's output there is distributed as p
    given the prefix, whatever q was, provided the draft token was drawn from q with the
    draft's own fresh uniform (Leviathan et al. 2022, Theorem 3.5, applied per position).
    Whether position j is drafted at all is decided by the row's horizon (fixed by earlier
    rounds before this round draws anything) and by q of the drafts before j (the prefix and
    the draft's own uniforms), never by this round's acceptance uniforms or target. If j is
    drafted, the rule applies; if not, the token is drawn from p_j itself, the same
    distribution. Every token is thus p-distributed given any history, so the sequence is
    distributed exactly as autoregressive sampling from p.

    Worked example, k = 4, one row with horizon 3 and confidence 0.4, greedy:
      draft: d_1 = 7 (q 0.9), d_2 = 2 (q 0.3 < 0.4: stop)         -> m = 2, slots 3-4 stale
      verify: target argmaxes after [out[n], 7, 2, *, *] = [7, 2, 5, *, *]
      accept: the rule sees 2 leading matches (>= m), so a = 2 and the next token is the
              target's argmax at slot m = 2, 5; the row commits [7, 2, 5].
      horizon: stopped early, all m accepted -> stays 3.

    Args:
      target: a `DecodeModel`.
      draft: a `DecodeModel` with the target's vocabulary, or None when k == 0.
      prompt_ids: int32 [batch, S], left-aligned, padded.
      prompt_lengths: int32 [batch], >= 1.
      row_keys: int64 [batch], the per-row random-stream keys.
      seed: int64 [], the request seed.
      config: statics.
      accept_fn: the acceptance rule of sampled decoding (tests pass deliberately wrong rules
        here); greedy decoding uses `acceptance.accept_greedy`.
      draft_sample_fn: how a sampled draft token is chosen from its distribution and a
        uniform (greedy decoding takes the argmax).
      horizons: int32 [batch], each row's first horizon in [1, k] (adaptive mode; default
        k); ignored otherwise.

    Returns:
      (out_ids int32 [batch, buffer_length], lengths int32 [batch], final `LoopState`).
    """
    k = config.k
    if k > 0 and draft is None:
        raise ValueError("k > 0 needs a draft model")
    # Static when known (it always is under tf.function with concrete inputs), so that every
    # loop variable keeps one static shape across iterations.
    batch = prompt_ids.shape[0] if prompt_ids.shape[0] is not None else tf.shape(prompt_ids)[0]
    length = config.buffer_length
    keys = rng.row_keys_for(seed, row_keys)                                  # [batch, 2]

    # Encoders run once here; contexts are captured by the loop body, not carried.
    target_context, target_cache = _prepare(target, prompt_ids, prompt_lengths, length,
                                            window=k + 1)
    feature_draft = k > 0 and uses_target_features(draft)
    feature_layers = tuple(draft.feature_layers) if feature_draft else ()
    parallel_draft = k > 0 and drafts_in_parallel(draft)
    if parallel_draft:
        draft.check_k(k)
    if feature_draft:
        # No draft encoder: the draft cross-attends to the target's encoder output.
        draft_context, draft_cache = draft.prepare_with_target(
            target, target_context, prompt_ids, prompt_lengths, length)
        first_features = tf.zeros([batch, draft.config.d_model], tf.float32)
    elif k > 0:
        if reads_target_encoder(draft):  # No draft encoder: the target's output, projected.
            draft_context, draft_cache = draft.prepare_with_target(
                target, target_context, prompt_ids, prompt_lengths, length)
        else:
            draft_context, draft_cache = draft.prepare(prompt_ids, prompt_lengths, length)
        first_features = tf.zeros([batch, 0], tf.float32)
    else:
        draft_context, draft_cache = (), ()
        first_features = tf.zeros([batch, 0], tf.float32)

    zeros = tf.zeros([batch], tf.int32)
    state = LoopState(
        round_idx=tf.constant(0),
        out_ids=tf.fill([batch, length], tf.constant(config.start_id, tf.int32)),
        lengths=zeros, done=tf.zeros([batch], tf.bool),
        target_cache=target_cache, draft_cache=draft_cache,
        rounds=zeros, drafted=zeros, accepted=zeros, verified=zeros,
        accepted_per_position=tf.zeros([batch, k], tf.int32),
        beta_sum=tf.zeros([batch], tf.float32),
        horizon=(tf.clip_by_value(tf.cast(horizons, tf.int32), 1, max(k, 1))
                 if config.adaptive is not None and horizons is not None
                 else tf.fill([batch], k)),
        draft_features=first_features)
    adaptive = config.adaptive is not None and k > 0
    rows = tf.range(batch)[:, None]
    slot = tf.range(k + 1)[None, :]                                          # [1, k+1]

    def body(state: LoopState) -> LoopState:
        n = state.lengths
        live = ~state.done
        last_ids = _gather_rows(state.out_ids, n)                            # [batch]
        if k > 0:
            draft_ids, draft_probs, drafted, draft_cache = _draft_block(
                draft, draft_context, state.draft_cache, last_ids, n, state.done,
                state.horizon, keys, state.round_idx, config, draft_sample_fn,
                state.draft_features)
            window_ids = tf.concat([last_ids[:, None], draft_ids], axis=1)   # [batch, k+1]
        else:
            draft_cache = state.draft_cache
            window_ids = last_ids[:, None]
        num_accepted, next_ids, beta, target_cache, target_features = _verify(
            target, target_context, state.target_cache, window_ids, n[:, None] + slot,
            draft_ids if k > 0 else None, draft_probs if k > 0 else None, keys,
            state.round_idx, config, accept_fn, drafted if adaptive else None,
            feature_layers, live)
        verified_features = (draft.input_features(target_features) if feature_draft
                             else None)                                      # [batch, k+1, D]
        proposed = (tf.concat([draft_ids, next_ids[:, None]], axis=1) if k > 0
                    else next_ids[:, None])

        # Tokens for positions n+1 .. n+k+1: accepted drafts, then the next token at slot a;
        # slots past a keep stale drafts, which lie beyond the row's new length.
        new_ids = tf.where(slot == num_accepted[:, None], next_ids[:, None], proposed)
        emitted = num_accepted + 1
        finished = tf.zeros_like(live)
        # Drafts that count in the statistics: all k, except that nothing past a drafted
        # or an emitted EOS counts (such drafts are never drafted, or never matter).
        counted = drafted if adaptive else tf.fill([batch], k)
        if config.eos_id is not None:
            # Stop at the first EOS, even in the middle of an accepted block.
            is_eos = (new_ids == config.eos_id) & (slot < emitted[:, None])
            first_eos = tf.argmax(tf.cast(is_eos, tf.int32), axis=1, output_type=tf.int32)
            has_eos = tf.reduce_any(is_eos, axis=1)
            emitted = tf.where(has_eos, first_eos + 1, emitted)
            finished = has_eos
            if k > 0:
                drafted_eos = tf.equal(draft_ids, config.eos_id)             # [batch, k]
                if adaptive:
                    # Slots past a row's m drafts hold the EOS filler, not drafts: counting
                    # it would add a phantom drafted (and rejected) position per early stop.
                    drafted_eos &= slot[:, :k] < drafted[:, None]
                first_drafted_eos = tf.argmax(tf.cast(drafted_eos, tf.int32), axis=1,
                                              output_type=tf.int32)
                counted = tf.where(tf.reduce_any(drafted_eos, axis=1),
                                   first_drafted_eos + 1, counted)
                counted = tf.where(has_eos, tf.minimum(counted, first_eos + 1), counted)
        emitted = tf.minimum(emitted, config.max_new_tokens - n)
        finished |= n + emitted >= config.max_new_tokens

        indices = tf.stack([tf.broadcast_to(rows, tf.shape(new_ids)), n[:, None] + 1 + slot], -1)
        out_ids = tf.tensor_scatter_nd_update(state.out_ids, indices, new_ids)
        live_i = tf.cast(live, tf.int32)
        if k > 0:
            if not parallel_draft:  # Parallel drafts keep no cache.
                draft_cache = _draft_catch_up(draft, draft_context, draft_cache, draft_ids,
                                              n, drafted if adaptive else None,
                                              verified_features, live)
            accepted_now = tf.minimum(num_accepted, counted)
            verified_now = tf.minimum(num_accepted + 1, counted)
            verified_mask = tf.cast(slot[:, :k] < verified_now[:, None], tf.float32)
            beta_now = tf.reduce_sum(beta * verified_mask, axis=1)
            accepted_slots = tf.cast(slot[:, :k] < accepted_now[:, None], tf.int32)
        else:
            accepted_now, verified_now = zeros, zeros
            beta_now = tf.zeros([batch], tf.float32)
            accepted_slots = state.accepted_per_position
        return LoopState(
            round_idx=state.round_idx + 1,
            out_ids=out_ids,
            lengths=tf.where(live, n + emitted, n),
            done=state.done | (live & finished),
            target_cache=target_cache,
            draft_cache=draft_cache,
            rounds=state.rounds + live_i,
            drafted=state.drafted + live_i * counted if k > 0 else state.drafted,
            accepted=state.accepted + live_i * accepted_now,
            verified=state.verified + live_i * verified_now,
            accepted_per_position=state.accepted_per_position + live_i[:, None] * accepted_slots
            if k > 0 else state.accepted_per_position,
            beta_sum=state.beta_sum + tf.cast(live, tf.float32) * beta_now,
            horizon=_round_horizon(state, drafted, num_accepted, live, verified_now,
                                   beta_now, k, config.adaptive)
            if adaptive else state.horizon,
            # The feature of the new last position n + emitted - 1, which produced the
            # row's last committed token: the next round's first draft step reads it.
            draft_features=(_gather_rows_nd(verified_features, tf.maximum(emitted - 1, 0))
                            if feature_draft else state.draft_features))

    def cond(state: LoopState):
        return ~tf.reduce_all(state.done)

    # Every round commits >= 1 token per live row, so max_new_tokens rounds always suffice.
    (state,) = tf.while_loop(lambda s: cond(s), lambda s: (body(s),), (state,),
                             maximum_iterations=config.max_new_tokens)
    return state.out_ids, state.lengths, state
