"""The parts of a speculative round as compiled loops of their own, for `bench.round_breakdown`.

Each isolated loop repeats one part of a round (a draft step, the catch-up, the verify, the
acceptance rule, sampling, the loop with free models) on the real models, batch and shapes,
for a calibrated number of iterations; `SlopeLoop` times two iteration counts and takes the
slope, which cancels the fixed cost of a call. `Programs` holds the compiled programs of one
target/draft pair; `component_loops` builds the isolated loops of one (batch, k, sampling).
"""

import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import tensorflow as tf
from bench.free_models import SHIFT, free_pair
from tfspec import acceptance as acceptance_lib
from tfspec import decoding
from tfspec import generation
from tfspec import rng
from tfspec import quiet
from tfspec import sampling as sampling_lib

_PROBE_ITERATIONS = 5
_MAX_ITERATIONS = 20000
_GOLDEN = 0.6180339887  # Irrational step: the uniforms of successive iterations differ.


def start_id(model) -> int:
    """The id at decoder position 0 (as `tfspec.generate` picks it)."""
    return int(getattr(model, "decoder_start_id", model.pad_id))


def pad_batch(prompts: Sequence[Sequence[int]], pad_id: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """Prompts -> (int32 [B, S] left-aligned, padded to generate's bucket; int32 [B])."""
    lengths = np.array([len(p) for p in prompts], dtype=np.int32)
    width = generation.prompt_bucket(int(lengths.max()))
    ids = np.full([len(prompts), width], pad_id, dtype=np.int32)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
    return tf.constant(ids), tf.constant(lengths)


def checksum(nest) -> tf.Tensor:
    """float32 []: a sum over every tensor of `nest` (keeps all of it live for XLA)."""
    parts = [tf.reduce_sum(tf.cast(x, tf.float32)) for x in tf.nest.flatten(nest)
             if isinstance(x, tf.Tensor)]
    return tf.add_n(parts) if parts else tf.constant(0.0)


def _choose(logits: tf.Tensor, uniforms: tf.Tensor, sampling: sampling_lib.Sampling,
            vocab_ids: Optional[tf.Tensor] = None):
    """The draft block's token choice: logits [B, V] (or [B, N] over a draft vocabulary
    `vocab_ids` int32 [N]), uniforms [B] -> int32 [B] token ids."""
    if sampling.greedy:
        index = sampling_lib.argmax(logits)
    else:
        index = sampling_lib.sample_categorical(
            sampling_lib.logits_to_probs(logits, sampling), uniforms)
    return index if vocab_ids is None else tf.gather(vocab_ids, index)


def _cycling_uniforms(uniforms: tf.Tensor, i: tf.Tensor) -> tf.Tensor:
    """float32 [B] in [0, 1), different for every iteration i."""
    return tf.math.floormod(uniforms + _GOLDEN * tf.cast(i, tf.float32), 1.0)


# Each builder returns one tf.function(jit_compile=True) taking the iteration count last (a
# tensor, so N = 1 and the calibrated N share one trace). Positions cycle over
# [0, max_new_tokens) (+ the window), so every write stays inside the caches `prepare`
# allocated for the loop's buffer length max_new_tokens + k + 2.


def _draft_step_loop(draft, sampling: sampling_lib.Sampling, max_new_tokens: int):
    """fn(context, cache, start_ids int32 [B], uniforms float32 [B], iterations) -> []."""

    @tf.function(jit_compile=True, autograph=False)
    def draft_step(context, cache, start_ids, uniforms, iterations):
        def body(i, token, cache):
            positions = tf.fill(tf.shape(token[:, None]), i % max_new_tokens)
            logits, cache = draft.decode(context, cache, token[:, None], positions)
            # The token is fed back: every step depends on the previous one, as in the loop.
            return i + 1, _choose(logits[:, 0], _cycling_uniforms(uniforms, i), sampling,
                                  decoding.draft_vocabulary(draft)), cache
        _, token, _ = tf.while_loop(lambda i, *_: i < iterations, body,
                                    (tf.constant(0), start_ids, cache))
        return tf.reduce_sum(tf.cast(token, tf.float32))

    return draft_step


def _sample_loop(sampling: sampling_lib.Sampling):
    """fn(logits float32 [B, V], uniforms float32 [B], iterations) -> float32 []."""

    @tf.function(jit_compile=True, autograph=False)
    def sample(logits, uniforms, iterations):
        def body(i, token):
            # A row-constant shift from the previous token: same distribution, but the work
            # depends on the iteration, so XLA cannot hoist it out of the loop.
            shifted = logits + SHIFT * tf.cast(token % 2, tf.float32)[:, None]
            return i + 1, _choose(shifted, _cycling_uniforms(uniforms, i), sampling)
        token0 = tf.zeros(tf.shape(logits)[:1], tf.int32)
        _, token = tf.while_loop(lambda i, *_: i < iterations, body,
                                 (tf.constant(0), token0))
        return tf.reduce_sum(tf.cast(token, tf.float32))

    return sample


def _catch_up_loop(draft, max_new_tokens: int):
    """fn(context, cache, start_ids int32 [B], iterations) -> float32 [] (cache checksum)."""
    vocab_size = draft.vocab_size

    @tf.function(jit_compile=True, autograph=False)
    def catch_up(context, cache, start_ids, iterations):
        def body(i, cache):
            ids = tf.math.floormod(start_ids + i, vocab_size)[:, None]
            positions = tf.fill(tf.shape(ids), i % max_new_tokens)
            _, cache = draft.decode(context, cache, ids, positions)  # Logits discarded.
            return i + 1, cache
        _, cache = tf.while_loop(lambda i, *_: i < iterations, body, (tf.constant(0), cache))
        return checksum(cache)

    return catch_up


def verify_loop(target, k: int, max_new_tokens: int):
    """fn(context, cache, window_ids int32 [B, k + 1], iterations) -> float32 []."""
    vocab_size = target.vocab_size
    slots = tf.range(k + 1)[None, :]

    @tf.function(jit_compile=True, autograph=False)
    def verify(context, cache, window_ids, iterations):
        def body(i, total, cache):
            ids = tf.math.floormod(window_ids + i, vocab_size)
            positions = tf.broadcast_to(i % max_new_tokens + slots, tf.shape(ids))
            logits, cache = target.decode(context, cache, ids, positions)
            # Consuming the logits keeps the LM head (unused logits would be dropped).
            return i + 1, total + tf.reduce_max(logits, axis=-1), cache
        total0 = tf.zeros(tf.shape(window_ids), tf.float32)
        _, total, _ = tf.while_loop(lambda i, *_: i < iterations, body,
                                    (tf.constant(0), total0, cache))
        return tf.reduce_sum(total)

    return verify


def _accept_loop(k: int, sampling: sampling_lib.Sampling):
    """fn(target_logits [B, k+1, V], draft_probs [B, k, V] (unused if greedy), draft_ids
    int32 [B, k], keys uint32 [B, 2], iterations) -> float32 [].

    Mirrors `decoding._verify` after the target call.
    """

    @tf.function(jit_compile=True, autograph=False)
    def accept(target_logits, draft_probs, draft_ids, keys, iterations):
        def body(i, num_accepted, total):
            # Row-constant shifts from the previous result (see `_sample_loop`).
            shift = SHIFT * tf.cast(num_accepted % 2, tf.float32)[:, None, None]
            logits = target_logits + shift
            if sampling.greedy:
                target_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
                result = acceptance_lib.accept_greedy(target_ids, draft_ids)
            else:
                target_probs = sampling_lib.logits_to_probs(logits, sampling)
                final_uniforms = rng.uniform(keys, i, 2, 1)[:, 0]
                accept_uniforms = rng.uniform(keys, i, 1, k)
                result = acceptance_lib.accept(target_probs, draft_probs * (1.0 + shift),
                                               draft_ids, accept_uniforms, final_uniforms)
            total += (tf.reduce_sum(result.beta)
                      + tf.cast(tf.reduce_sum(result.next_ids), tf.float32))
            return i + 1, result.num_accepted, total
        zeros = tf.zeros(tf.shape(draft_ids)[:1], tf.int32)
        _, _, total = tf.while_loop(lambda i, *_: i < iterations, body,
                                    (tf.constant(0), zeros, tf.constant(0.0)))
        return total

    return accept


def free_loop(free_target, free_draft, config: decoding.LoopConfig) -> Callable:
    """An outer compiled while loop whose every iteration is one whole free decode_loop.

    Returns:
      fn(prompt_ids, prompt_lengths, row_keys, iterations) -> (float32 [] checksum of every
      output of the loop, int32 [] loop rounds of the last decode_loop).
    """

    @tf.function(jit_compile=True, autograph=False)
    def free_loops(prompt_ids, prompt_lengths, row_keys, iterations):
        def body(i, total, rounds):
            # Inputs that depend on the previous iteration keep the inner loop inside the
            # outer one (XLA hoists loop-invariant work): the seed (sampled streams) and, for
            # greedy decoding, the prompt lengths the free logits depend on (+ 0: the
            # checksum of non-negative outputs is never negative, which XLA cannot know).
            lengths_i = prompt_lengths + tf.cast(total < 0.0, tf.int32)
            out_ids, lengths, state = decoding.decode_loop(
                free_target, free_draft, prompt_ids, lengths_i, row_keys,
                tf.cast(i, tf.int64), config)
            # Everything generate returns stays live, as in the real program.
            outputs = [out_ids, lengths, state.rounds, state.drafted, state.accepted,
                       state.verified, state.accepted_per_position, state.beta_sum]
            return i + 1, total + checksum(outputs), state.round_idx
        _, total, rounds = tf.while_loop(lambda i, *_: i < iterations, body,
                                         (tf.constant(0), tf.constant(0.0), tf.constant(0)))
        return total, rounds

    return free_loops


def time_once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class SlopeLoop:
    """One isolated loop timed at N = 1 and at a calibrated N (see `calibrate`)."""

    def __init__(self, name: str, run_n: Callable[[int], object]):
        self.name = name
        self._run_n = run_n
        self.iterations = _PROBE_ITERATIONS

    def calibrate(self, seconds: float) -> None:
        """Compiles, then picks N so that N - 1 iterations take about `seconds`.

        Probes N = 5, 20, 80, ... until the probe's extra iterations take a quarter of
        `seconds` (so dispatch noise cannot fake a tiny per-iteration cost), then
        extrapolates.
        """
        self._run_n(1)  # Compilation (one trace: the iteration count is a tensor).
        base = time_once(lambda: self._run_n(1))
        probe = _PROBE_ITERATIONS
        while True:
            span = time_once(lambda: self._run_n(probe)) - base
            if span >= seconds / 4 or probe >= _MAX_ITERATIONS:
                break
            probe = min(_MAX_ITERATIONS, probe * 4)
        per_iteration = max(span / (probe - 1), 1e-9)
        wanted = math.ceil(seconds / per_iteration) + 1
        self.iterations = int(min(_MAX_ITERATIONS, max(_PROBE_ITERATIONS, wanted)))

    def fns(self) -> List[Tuple[str, Callable[[], object]]]:
        return [(f"{self.name}@1", lambda: self._run_n(1)),
                (f"{self.name}@N", lambda: self._run_n(self.iterations))]

    def per_iteration_ms(self, times: Dict[str, float]) -> float:
        span = times[f"{self.name}@N"] - times[f"{self.name}@1"]
        return 1e3 * span / (self.iterations - 1)


def numpy_result(fn):
    """Wraps a compiled call so timing waits for its (small) result."""
    def run(*args):
        return tf.nest.map_structure(lambda x: x.numpy(), fn(*args))
    return run


def round_inputs(target, draft, target_context, target_cache, draft_context, draft_cache,
                  start_ids: tf.Tensor, k: int, sampling: sampling_lib.Sampling, seed: int):
    """Real logits of one first round: k draft steps from the start token, then one verify.

    Returns:
      (draft_logits0 float32 [B, V] (the first draft step's; [B, N] over a draft
      vocabulary), draft_ids int32 [B, k],
      draft_probs float32 [B, k, V] (one-hot when greedy), target_logits float32
      [B, k + 1, V]).
    """
    batch = int(start_ids.shape[0])
    uniforms = np.random.RandomState(seed).uniform(size=[k, batch]).astype(np.float32)
    token, ids, probs, first = start_ids, [], [], None
    cache = draft_cache
    for i in range(k):
        logits, cache = draft.decode(draft_context, cache, token[:, None],
                                     tf.fill([batch, 1], i))
        row = tf.cast(logits[:, 0], tf.float32)
        first = row if first is None else first
        step_probs = sampling_lib.logits_to_probs(row, sampling)
        vocab_ids = decoding.draft_vocabulary(draft)
        if vocab_ids is not None:  # q laid out over V, as the loop hands it to the rule.
            step_probs = decoding.to_full_vocabulary(step_probs, vocab_ids,
                                                     draft.vocab_size)
        token = _choose(row, tf.constant(uniforms[i]), sampling, vocab_ids)
        ids.append(token)
        probs.append(step_probs)
    draft_ids = tf.stack(ids, axis=1)
    window = tf.concat([start_ids[:, None], draft_ids], axis=1)
    positions = tf.broadcast_to(tf.range(k + 1)[None, :], tf.shape(window))
    target_logits, _ = target.decode(target_context, target_cache, window, positions)
    return first, draft_ids, tf.stack(probs, axis=1), tf.cast(target_logits, tf.float32)


class Programs:
    """The compiled programs of one pair, reused across batch sizes and temperatures.

    tf.function retraces per input shape (batch, prompt bucket), so one object serves every
    batch size; loops that do not depend on the sampling (catch-up, verify) are shared by
    the temperatures, the token choice by every k.
    """

    def __init__(self, target, draft, max_new_tokens: int, seed: int = 0):
        self.target = target
        self.draft = draft
        self.max_new_tokens = max_new_tokens
        self.free_target, self.free_draft = free_pair(target.vocab_size, target.eos_id,
                                                      target.pad_id, seed)
        self._cache = {}
        # Whether a decode program reads the kernel panels (tfspec.kernels) is fixed when it
        # is traced: packed before any program here is, so that the isolated loops run the
        # products `tfspec.generate` runs (it refreshes before its first trace too).
        for model in (target, draft):
            refresh = getattr(model, "refresh_decode_panels", None)
            if refresh is not None:
                refresh()

    def _get(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def prepare(self, model, max_length: int):
        """Compiled fn(prompt_ids, prompt_lengths) -> model.prepare(..., max_length)."""
        return self._get(("prepare", id(model), max_length), lambda: tf.function(
            lambda ids, lengths: model.prepare(ids, lengths, max_length), jit_compile=True,
            autograph=False))

    def prepare_over_batches(self, model, max_length: int, padded) -> Callable[[], None]:
        """A callable preparing every batch of `padded` (one compiled call each)."""
        compiled = self.prepare(model, max_length)

        def run():
            # Eager execution is synchronous (TF's default): each call returns when its
            # outputs are computed; copying them to numpy would add work generate never does.
            for ids, lengths in padded:
                compiled(ids, lengths)
        return run

    def loop(self, name: str, k: int, sampling: sampling_lib.Sampling) -> Callable:
        """The isolated loop `name` (see the builders), returning numpy."""
        m = self.max_new_tokens
        builders = {
            "draft_step": (k, sampling, lambda: _draft_step_loop(self.draft, sampling, m)),
            "sample": (None, sampling, lambda: _sample_loop(sampling)),
            "catch_up": (k, None, lambda: _catch_up_loop(self.draft, m)),
            "verify": (k, None, lambda: verify_loop(self.target, k, m)),
            "accept": (k, sampling, lambda: _accept_loop(k, sampling)),
            "free_loop": (k, sampling, lambda: free_loop(
                self.free_target, self.free_draft, decoding.LoopConfig(
                    k=k, max_new_tokens=m, sampling=sampling, eos_id=self.target.eos_id,
                    start_id=start_id(self.target)))),
        }
        key_k, key_sampling, build = builders[name]
        return self._get((name, key_k, key_sampling), lambda: numpy_result(build()))


# Parts whose cost depends on the prompt width (cross-attention over the encoder states):
# timed on one batch of every prompt bucket of the pool, weighted by the real loop's rounds.
WIDTH_PARTS = ("draft_step", "catch_up", "verify")
# Parts that do not: timed once, on the first batch.
SHARED_PARTS = ("accept", "free_loop", "sample")


def component_loops(programs: Programs, padded_batch, k: int,
                     sampling: sampling_lib.Sampling, seed: int,
                     names: Sequence[str]) -> Tuple[Dict[str, SlopeLoop], Optional[int]]:
    """The isolated loops `names` of one k on one padded batch, with their real inputs.

    Returns:
      ({name: uncalibrated `SlopeLoop`}, the loop rounds of one free decode_loop if
      "free_loop" is among `names`, else None).
    """
    target, draft = programs.target, programs.draft
    prompt_ids, prompt_lengths = padded_batch
    batch, width = int(prompt_ids.shape[0]), int(prompt_ids.shape[1])
    length = programs.max_new_tokens + k + 2  # decoding.LoopConfig.buffer_length.
    start_ids = tf.fill([batch], start_id(target))
    row_keys = tf.range(batch, dtype=tf.int64)
    keys = rng.row_keys_for(tf.constant(seed, tf.int64), row_keys)
    uniforms = tf.constant(np.random.RandomState(seed).uniform(size=batch), tf.float32)
    target_context, target_cache = programs.prepare(target, length)(prompt_ids, prompt_lengths)
    draft_context, draft_cache = programs.prepare(draft, length)(prompt_ids, prompt_lengths)
    draft_logits0, draft_ids, draft_probs, target_logits = round_inputs(
        target, draft, target_context, target_cache, draft_context, draft_cache, start_ids,
        k, sampling, seed)
    window_ids = tf.concat([start_ids[:, None], draft_ids], axis=1)
    args = {
        "draft_step": (draft_context, draft_cache, start_ids, uniforms),
        "catch_up": (draft_context, draft_cache, start_ids),
        "verify": (target_context, target_cache, window_ids),
        "accept": (target_logits, draft_probs, draft_ids, keys),
        "free_loop": (prompt_ids, prompt_lengths, row_keys),
        "sample": (draft_logits0, uniforms),
    }
    loops = {}
    for name in names:
        compiled = programs.loop(name, k, sampling)
        loops[name] = SlopeLoop(f"{name}{k}@{width}", lambda n, f=compiled, a=args[name]:
                                 f(*a, tf.constant(n, tf.int32)))
    free_rounds = None
    if "free_loop" in names:
        _, free_rounds = programs.loop("free_loop", k, sampling)(*args["free_loop"],
                                                                 tf.constant(1))
    return loops, None if free_rounds is None else int(free_rounds)


def width_weights(gens, widths: Sequence[int]) -> Dict[int, float]:
    """{prompt width: share of the loop rounds} of calls `gens` made on batches of `widths`."""
    rounds: Dict[int, int] = {}
    for gen, width in zip(gens, widths):
        rounds[width] = rounds.get(width, 0) + int(np.max(gen.stats.rounds))
    total = sum(rounds.values())
    return {w: (r / total if total else 1.0 / len(rounds)) for w, r in rounds.items()}


# Each builder's tf.function is traced once per shape on purpose: no retracing warning.
for _builder in (_draft_step_loop, _sample_loop, _catch_up_loop, verify_loop, _accept_loop,
                 free_loop, Programs.prepare):
    quiet.expect_retracing(_builder)
