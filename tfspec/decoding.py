"""The decoding loop: draft k, verify k + 1 in one target call, accept, commit; per row.

One `tf.while_loop` runs rounds until every row has finished. Each round, for every row
independently (n = the row's committed length, out[n] its last committed token):

  1. Draft catch-up + first draft: the draft decodes [out[n-1], out[n]] at positions
     [n-1, n]. Re-writing position n-1 is harmless and covers the case where the previous
     round accepted all k drafts (then the draft never saw its own last draft d_k, which
     now sits at n-1, nor the bonus token at n). The second logit row gives q_1; d_1 ~ q_1.
  2. k - 1 more draft steps, one token each: d_i at position n + i gives q_{i+1}.
  3. Verify: the target decodes [out[n], d_1 .. d_k] at positions n .. n + k, giving
     p_1 .. p_{k+1} in one call.
  4. `acceptance.accept` returns a (leading accepted drafts) and the next token t.
  5. Commit: positions n+1 .. n+a+1 receive d_1 .. d_a, t; the row advances by a + 1
     (its own a: rows never move by the batch minimum), cut at the first EOS and at
     max_new_tokens.

Worked example, k = 3, two rows, start token s:

  before:   row 0 out = [s, 5, 8]        n = 2      row 1 out = [s, 4]  n = 1
  drafts:   row 0 d = [3, 3, 9]                     row 1 d = [7, 2, 6]
  accept:   row 0 a = 1, t = 4                      row 1 a = 3, bonus t = 1 (EOS)
  after:    row 0 out = [s, 5, 8, 3, 4]  n = 4      row 1 out = [s, 4, 7, 2, 6, 1]  n = 5, done

Rollback is by masking: row 0's target cache still holds entries for its rejected drafts at
positions 4 and 5, but a query at position p only attends to slots <= p, and those slots
are rewritten before any later query can reach them. Buffers are sized
max_new_tokens + k + 2 so that every fixed-width write stays in bounds, even for rows that
have finished (they keep computing garbage past their length, which is masked out).

Shapes are static (k, max_new_tokens and the sampling transform are Python constants), so
XLA compiles the whole loop once per (batch, prompt bucket, k, sampling) combination.
"""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import tensorflow as tf

from tfspec import acceptance as acceptance_lib
from tfspec import rng
from tfspec import sampling as sampling_lib

# Random streams of one round (see `rng.uniform`).
_STREAM_DRAFT = 0
_STREAM_ACCEPT = 1
_STREAM_FINAL = 2


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The statics of one compiled loop (changing any of them retraces)."""

    k: int
    max_new_tokens: int
    sampling: sampling_lib.Sampling
    eos_id: Optional[int]
    start_id: int

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
    drafted: tf.Tensor                # int32 [batch]
    accepted: tf.Tensor               # int32 [batch]
    verified: tf.Tensor               # int32 [batch]
    accepted_per_position: tf.Tensor  # int32 [batch, k]
    beta_sum: tf.Tensor               # float32 [batch]
    draft_catch_up: tf.Tensor         # bool [batch], previous round accepted all k drafts


def _gather_rows(values: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """values [batch, L], index [batch] -> [batch]: values[b, index[b]]."""
    return tf.gather(values, index, batch_dims=1)


def _draft_block(draft, draft_context, draft_cache, out_ids, n, catch_up, keys, round_idx,
                 config: LoopConfig, draft_sample_fn):
    """Steps 1-2 of the round: k draft tokens and the distributions they were drawn from.

    Args:
      catch_up: bool [batch], rows whose previous round accepted all k drafts: the draft
        never decoded its own last draft (now at position n - 1), so it needs the two-token
        window [out[n-1], out[n]]; other rows need only [out[n]].

    Returns:
      (draft_ids int32 [batch, k], draft_probs float32 [batch, k, V] or None in greedy mode,
      draft_cache).
    """
    k = config.k
    greedy = config.sampling.greedy
    uniforms = None if greedy else rng.uniform(keys, round_idx, _STREAM_DRAFT, k)

    def first_window(width):
        def run():
            # Positions [n - width + 1 .. n]; at n = 0 a two-wide window repeats position 0
            # (same token, same slot), which is harmless.
            positions = tf.maximum(n[:, None] + tf.range(1 - width, 1)[None, :], 0)
            logits, cache = draft.decode(draft_context, draft_cache,
                                         tf.gather(out_ids, positions, batch_dims=1), positions)
            return logits[:, -1], cache
        return run

    # Both widths are compiled; the cheaper one-token window runs whenever no row needs the
    # catch-up (verifying more positions is not free on every backend, e.g. XLA:CPU).
    logits, draft_cache = tf.cond(tf.reduce_any(catch_up), first_window(2), first_window(1))

    def choose(logits, i):
        """logits [batch, V] -> (token [batch], probs [batch, V] or None)."""
        if greedy:  # The one-hot distribution is implied by the argmax; skip V-wide work.
            return tf.argmax(logits, axis=-1, output_type=tf.int32), None
        probs = sampling_lib.logits_to_probs(logits, config.sampling)
        return draft_sample_fn(probs, tf.gather(uniforms, i, axis=1)), probs

    token, probs = choose(logits, 0)
    ids_ta = tf.TensorArray(tf.int32, size=k).write(0, token)
    probs_ta = () if greedy else tf.TensorArray(tf.float32, size=k).write(0, probs)

    def step(i, token, cache, ids_ta, probs_ta):
        logits, cache = draft.decode(draft_context, cache, token[:, None], (n + i)[:, None])
        token, probs = choose(logits[:, 0], i)
        if not greedy:
            probs_ta = probs_ta.write(i, probs)
        return i + 1, token, cache, ids_ta.write(i, token), probs_ta

    # A while loop (not a Python loop) keeps one copy of the draft in the compiled program.
    _, _, draft_cache, ids_ta, probs_ta = tf.while_loop(
        lambda i, *_: i < k, step, (tf.constant(1), token, draft_cache, ids_ta, probs_ta),
        maximum_iterations=k - 1 if k > 1 else 0)
    draft_ids = tf.transpose(ids_ta.stack(), [1, 0])                         # [batch, k]
    draft_probs = None if greedy else tf.transpose(probs_ta.stack(), [1, 0, 2])
    return draft_ids, draft_probs, draft_cache


def _verify(target, target_context, target_cache, window_ids, positions, draft_ids,
            draft_probs, keys, round_idx, config: LoopConfig, accept_fn):
    """Steps 3-4 of the round: one target call over k + 1 positions, then the rule.

    Args:
      window_ids: int32 [batch, k + 1], [out[n], d_1 .. d_k].
      positions: int32 [batch, k + 1], n .. n + k.
      draft_ids: int32 [batch, k] or None (k = 0).
      draft_probs: float32 [batch, k, V], or None (k = 0 or greedy).

    Returns:
      (num_accepted int32 [batch], next_ids int32 [batch], beta float32 [batch, k] or None,
      target_cache).
    """
    k = config.k
    target_logits, target_cache = target.decode(target_context, target_cache, window_ids,
                                                positions)
    if config.sampling.greedy:
        # Greedy is the general rule on one-hot distributions; working on argmax ids avoids
        # V-wide softmax/cumsum passes, which dominate the rounds of small models.
        target_ids = tf.argmax(target_logits, axis=-1, output_type=tf.int32)  # [batch, k+1]
        if k == 0:
            return tf.zeros_like(target_ids[:, 0]), target_ids[:, 0], None, target_cache
        result = acceptance_lib.accept_greedy(target_ids, draft_ids)
    else:
        target_probs = sampling_lib.logits_to_probs(target_logits, config.sampling)
        final_uniforms = rng.uniform(keys, round_idx, _STREAM_FINAL, 1)[:, 0]
        if k == 0:
            next_ids = sampling_lib.sample_categorical(target_probs[:, 0], final_uniforms)
            return tf.zeros_like(next_ids), next_ids, None, target_cache
        accept_uniforms = rng.uniform(keys, round_idx, _STREAM_ACCEPT, k)
        result = accept_fn(target_probs, draft_probs, draft_ids, accept_uniforms,
                           final_uniforms)
    return result.num_accepted, result.next_ids, result.beta, target_cache


def decode_loop(target, draft, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                row_keys: tf.Tensor, seed: tf.Tensor, config: LoopConfig,
                accept_fn: Callable = acceptance_lib.accept,
                draft_sample_fn: Callable = sampling_lib.sample_categorical):
    """Runs the speculative (k > 0) or autoregressive (k = 0) loop.

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
    target_context, target_cache = target.prepare(prompt_ids, prompt_lengths, length)
    if k > 0:
        draft_context, draft_cache = draft.prepare(prompt_ids, prompt_lengths, length)
    else:
        draft_context, draft_cache = (), ()

    zeros = tf.zeros([batch], tf.int32)
    state = LoopState(
        round_idx=tf.constant(0),
        out_ids=tf.fill([batch, length], tf.constant(config.start_id, tf.int32)),
        lengths=zeros, done=tf.zeros([batch], tf.bool),
        target_cache=target_cache, draft_cache=draft_cache,
        rounds=zeros, drafted=zeros, accepted=zeros, verified=zeros,
        accepted_per_position=tf.zeros([batch, k], tf.int32),
        beta_sum=tf.zeros([batch], tf.float32),
        draft_catch_up=tf.zeros([batch], tf.bool))
    rows = tf.range(batch)[:, None]
    slot = tf.range(k + 1)[None, :]                                          # [1, k+1]

    def body(state: LoopState) -> LoopState:
        n = state.lengths
        live = ~state.done
        last_ids = _gather_rows(state.out_ids, n)                            # [batch]
        if k > 0:
            draft_ids, draft_probs, draft_cache = _draft_block(
                draft, draft_context, state.draft_cache, state.out_ids, n,
                state.draft_catch_up, keys, state.round_idx, config, draft_sample_fn)
            window_ids = tf.concat([last_ids[:, None], draft_ids], axis=1)   # [batch, k+1]
        else:
            draft_cache = state.draft_cache
            window_ids = last_ids[:, None]
        num_accepted, next_ids, beta, target_cache = _verify(
            target, target_context, state.target_cache, window_ids, n[:, None] + slot,
            draft_ids if k > 0 else None, draft_probs if k > 0 else None, keys,
            state.round_idx, config, accept_fn)
        proposed = (tf.concat([draft_ids, next_ids[:, None]], axis=1) if k > 0
                    else next_ids[:, None])

        # Tokens for positions n+1 .. n+k+1: accepted drafts, then the next token at slot a;
        # slots past a keep stale drafts, which lie beyond the row's new length.
        new_ids = tf.where(slot == num_accepted[:, None], next_ids[:, None], proposed)
        emitted = num_accepted + 1
        finished = tf.zeros_like(live)
        if config.eos_id is not None:
            # Stop at the first EOS, even in the middle of an accepted block.
            is_eos = (new_ids == config.eos_id) & (slot < emitted[:, None])
            first_eos = tf.argmax(tf.cast(is_eos, tf.int32), axis=1, output_type=tf.int32)
            has_eos = tf.reduce_any(is_eos, axis=1)
            emitted = tf.where(has_eos, first_eos + 1, emitted)
            finished = has_eos
        emitted = tf.minimum(emitted, config.max_new_tokens - n)
        finished |= n + emitted >= config.max_new_tokens

        indices = tf.stack([tf.broadcast_to(rows, tf.shape(new_ids)), n[:, None] + 1 + slot], -1)
        out_ids = tf.tensor_scatter_nd_update(state.out_ids, indices, new_ids)
        live_i = tf.cast(live, tf.int32)
        if k > 0:
            verified_now = tf.minimum(num_accepted + 1, k)
            verified_mask = tf.cast(slot[:, :k] < verified_now[:, None], tf.float32)
            beta_now = tf.reduce_sum(beta * verified_mask, axis=1)
            accepted_slots = tf.cast(slot[:, :k] < num_accepted[:, None], tf.int32)
        else:
            verified_now, beta_now = zeros, tf.zeros([batch], tf.float32)
            accepted_slots = state.accepted_per_position
        return LoopState(
            round_idx=state.round_idx + 1,
            out_ids=out_ids,
            lengths=tf.where(live, n + emitted, n),
            done=state.done | (live & finished),
            target_cache=target_cache,
            draft_cache=draft_cache,
            rounds=state.rounds + live_i,
            drafted=state.drafted + live_i * k,
            accepted=state.accepted + live_i * num_accepted,
            verified=state.verified + live_i * verified_now,
            accepted_per_position=state.accepted_per_position + live_i[:, None] * accepted_slots
            if k > 0 else state.accepted_per_position,
            beta_sum=state.beta_sum + tf.cast(live, tf.float32) * beta_now,
            draft_catch_up=live & ~finished & (num_accepted == k) if k > 0
            else state.draft_catch_up)

    def cond(state: LoopState):
        return ~tf.reduce_all(state.done)

    # Every round commits >= 1 token per live row, so max_new_tokens rounds always suffice.
    (state,) = tf.while_loop(lambda s: cond(s), lambda s: (body(s),), (state,),
                             maximum_iterations=config.max_new_tokens)
    return state.out_ids, state.lengths, state
