"""`tfspec.generate`: validated inputs in, tokens and per-row statistics out."""

import dataclasses
import time
import weakref
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from tfspec import acceptance as acceptance_lib
from tfspec import adaptive as adaptive_lib
from tfspec import decoding
from tfspec import distribute as distribute_lib
from tfspec import frozen
from tfspec import kernels
from tfspec import memory
from tfspec import quiet
from tfspec import sampling as sampling_lib
from tfspec import stats as stats_lib
from tfspec.models import prompt_lookup

_TARGET_DEFAULT = object()  # eos_id sentinel: "use the target's EOS id".
_MIN_PROMPT_BUCKET = 8


@dataclasses.dataclass
class Generation:
    """The result of `generate`.

    Attributes:
      tokens: int32 [batch, max_new_tokens], the pad id after a row ends (EOS included).
      lengths: int32 [batch], tokens emitted per row.
      stats: per-row `DecodeStats`.
      mode: with k="auto", the mode this call ran ("speculative" or "autoregressive");
        None for a fixed k.
      acceptance: the acceptance rule of the call: "exact" (the default, distribution-
        preserving) or "typical" (Medusa's typical acceptance, `acceptance="typical"` or a
        `tfspec.TypicalAcceptance`: NOT distribution-preserving at temperature > 0; at 0 it
        ran the exact greedy rule). Autoregressive calls judge no drafts under either.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    stats: stats_lib.DecodeStats
    mode: Optional[str] = None
    acceptance: str = acceptance_lib.EXACT

    def row_tokens(self, i: int) -> list:
        return self.tokens[i, :self.lengths[i]].tolist()


def prompt_bucket(width: int) -> int:
    """The padded prompt width compiled for, so that prompts of varied lengths share
    compiled loops (callers that warm up compiles use this rule).

    Buckets are 8, 12, 16, 24, 32, 48, 64, 96, ...: powers of two and the midpoints
    1.5 x 2^j. Each request runs the encoders over the whole bucket, which is compute-bound
    work (a 512-wide bucket costs the embedded pair ~90 ms on this project's CPU, a 384-wide
    one ~58 ms), so halving the worst-case padding (50% -> 33%) pays for itself against
    twice as many shapes to compile.
    """
    width = max(int(width), _MIN_PROMPT_BUCKET)
    power = 1 << (width - 1).bit_length()          # smallest power of two >= width
    midpoint = 3 * power // 4                       # 1.5 x the power of two below it
    return midpoint if width <= midpoint and midpoint >= _MIN_PROMPT_BUCKET else power


def _prompt_array(prompts, prompt_lengths, pad_id: int):
    """Normalises prompts to (int32 [batch, bucket] left-aligned, int32 [batch])."""
    if prompt_lengths is None:
        if isinstance(prompts, np.ndarray) and prompts.ndim == 2:
            raise ValueError("an array of prompts needs prompt_lengths (int [batch])")
        rows = [list(_integer_ids(p, i).reshape(-1)) for i, p in enumerate(prompts)]
        lengths = np.array([len(r) for r in rows], dtype=np.int32)
        array = np.full([len(rows), max(lengths.max(initial=1), 1)], pad_id, dtype=np.int64)
        for i, row in enumerate(rows):
            array[i, :len(row)] = row
    else:
        array = _integer_ids(prompts, None)
        lengths = np.asarray(prompt_lengths, dtype=np.int32).reshape(-1)
        if array.ndim != 2 or lengths.shape[0] != array.shape[0]:
            raise ValueError(f"prompts must be int [batch, width] with prompt_lengths [batch]; "
                             f"got shapes {list(array.shape)} and {list(lengths.shape)}")
        if np.any(lengths > array.shape[1]):
            raise ValueError("a prompt length exceeds the prompt array width")
    if len(lengths) == 0:
        raise ValueError("prompts is empty: pass at least one prompt")
    empty = np.flatnonzero(lengths < 1)
    if empty.size:
        raise ValueError(f"prompt {int(empty[0])} is empty ({empty.size} empty in all); every "
                         f"prompt needs at least one token")
    width = prompt_bucket(array.shape[1])
    padded = np.full([array.shape[0], width], pad_id, dtype=np.int64)
    padded[:, :array.shape[1]] = array
    return padded, lengths


def _integer_ids(values, row: Optional[int]) -> np.ndarray:
    """int64 array of token ids; fractional, boolean or non-numeric ids are refused (a cast
    would silently truncate 5.7 to 5)."""
    where = "prompts" if row is None else f"prompt {row}"
    try:
        array = np.asarray(values)
    except ValueError as e:  # Ragged nesting.
        raise ValueError(f"{where} is not a list of token ids ({e})") from None
    if array.size == 0 or np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"{where} has token ids of type {array.dtype}; token ids are "
                         f"integers")
    bad = ~np.isfinite(array) | (array != np.round(array))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{where} has a token id that is not an integer "
                         f"({float(array[index])!r} at position {index[-1]}); token ids are "
                         f"integers")
    return array.astype(np.int64)


def _check_tokens(array: np.ndarray, lengths: np.ndarray, vocab_size: int) -> None:
    valid = np.arange(array.shape[1])[None, :] < lengths[:, None]
    bad = valid & ((array < 0) | (array >= vocab_size))
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(f"prompt {row} has token ids outside the vocabulary [0, {vocab_size})")


class _CompiledLoops:
    """The compiled loops of one target: autoregressive ones, and per draft.

    Drafts are weak keys, so a draft the caller drops takes its compiled loops with it.
    """

    def __init__(self):
        self.autoregressive = {}
        self.by_draft = weakref.WeakKeyDictionary()

    def table(self, draft) -> dict:
        return self.autoregressive if draft is None else self.by_draft.setdefault(draft, {})

    def functions(self) -> list:
        tables = [self.autoregressive] + list(self.by_draft.values())
        return [fn for table in tables for fn in table.values()]


# {target: _CompiledLoops}, target a weak key. The compiled functions reach the target and
# the draft only through weak references (see `_loop_fn`): a strong reference from a cached
# value to its own weak key would keep both alive forever, so a dropped model is freed
# together with its compiled programs.
_COMPILED: "weakref.WeakKeyDictionary[Any, _CompiledLoops]" = weakref.WeakKeyDictionary()


def compiled_loops(target) -> list:
    """The compiled loops (`tf.function`s) cached for `target`, for tests and diagnostics."""
    loops = _COMPILED.get(target)
    return loops.functions() if loops is not None else []


def _loop_fn(target, draft, config: decoding.LoopConfig, jit_compile: bool, accept_fn,
             draft_sample_fn, check_panels: bool = False):
    if jit_compile is None:  # Eager: tf.while_loop runs as a Python loop; nothing cached.
        return _loop_body(lambda: target, lambda: draft, config, accept_fn, draft_sample_fn)
    table = _COMPILED.setdefault(target, _CompiledLoops()).table(draft)
    # Whether few-row products use tfspec.kernels, and from which panel variables (their
    # widths), is decided when the loop is traced.
    key = (config, jit_compile, accept_fn, draft_sample_fn, kernels.allowed(),
           kernels.prompt_attention_allowed(),
           kernels.panel_layout(target), None if draft is None else kernels.panel_layout(draft),
           _vocabulary_key(draft), _adapter_key(draft), check_panels)
    if key not in table:
        # Weak references: the cache entry must not keep its own keys alive. The function
        # only runs while the target is alive (it is reached through the target's entry).
        target_ref = weakref.ref(target)
        draft_ref = (lambda: None) if draft is None else weakref.ref(draft)
        # Traced once per (batch, prompt bucket) input shape. autograph=False: the loop is
        # written with explicit tf.while_loop / tf.cond and Python control flow on static
        # values only, so AutoGraph has nothing to convert, yet converting the ~350 functions
        # the loop reaches cost 2-8 s per process (a tiny pair's first call 11.0 -> 2.8 s).
        table[key] = tf.function(
            _loop_body(target_ref, draft_ref, config, accept_fn, draft_sample_fn,
                       check_panels),
            jit_compile=jit_compile, autograph=False)
    return table[key]


def _adapter_key(draft) -> Optional[int]:
    """Which target-encoder adapter a loop is traced with (`T5.attach_target_encoder`): the
    program reads that projection variable, or runs the draft's own encoder without one.
    (The compiled function holds the variable, so its id is not reused while cached.)"""
    projection = getattr(draft, "target_encoder_projection", None)
    return None if projection is None else id(projection)


def _vocabulary_key(draft) -> Optional[bytes]:
    """The draft vocabulary a loop is traced with (it is a constant of the program)."""
    ids = getattr(draft, "draft_vocab_ids", None)
    return None if ids is None else np.asarray(ids, np.int32).tobytes()


def _loop_body(target_fn, draft_fn, config: decoding.LoopConfig, accept_fn, draft_sample_fn,
               check_panels: bool = False):
    """The loop as a function of its tensor inputs; `target_fn()` / `draft_fn()` give the
    models (weak references when compiled). Adaptive loops take the rows' first horizons
    (int32 [batch]) after the row keys and return the last ones. With `check_panels` it
    takes a last input `check_mask`, bool [2]: whether to check the target's panels and
    the draft side's (those of every other model the program reads); and it returns
    "panels_current" (bool []): whether every `tfspec.kernels` panel cache it checked still
    matches its sources (`PanelCache.current`; see `_generate`). A frozen model's check
    is switched off by the mask (`tfspec.freeze_weights`), not compiled out, so freezing
    compiles nothing."""

    def outputs(out_ids, lengths, state):
        return {"out_ids": out_ids, "lengths": lengths, "rounds": state.rounds,
                "drafted": state.drafted, "accepted": state.accepted,
                "verified": state.verified,
                "accepted_per_position": state.accepted_per_position,
                "beta_sum": state.beta_sum, "horizon": state.horizon}

    def checked(check_mask, **kwargs):
        with kernels.recording_panel_reads() as reads:
            out = outputs(*decoding.decode_loop(
                target_fn(), draft_fn(), config=config, accept_fn=accept_fn,
                draft_sample_fn=draft_sample_fn, **kwargs))
        if check_panels:
            target_cache = kernels.existing_panel_cache(target_fn())
            current = [tf.constant(True)]
            for cache, entries in reads.checks():
                # An XLA conditional: a frozen model's branch never reads its weights.
                check = check_mask[0] if cache is target_cache else check_mask[1]
                current.append(tf.cond(check, lambda c=cache, e=entries: c.current(e),
                                       lambda: tf.constant(True)))
            out["panels_current"] = tf.reduce_all(tf.stack(current))
        return out

    # Explicit signatures (a tf.function binds every declared input): the check mask is an
    # input only of programs that check their panels.
    def run(prompt_ids, prompt_lengths, row_keys, seed):
        return checked(None, prompt_ids=prompt_ids, prompt_lengths=prompt_lengths,
                       row_keys=row_keys, seed=seed)

    def run_adaptive(prompt_ids, prompt_lengths, row_keys, horizons, seed):
        return checked(None, prompt_ids=prompt_ids, prompt_lengths=prompt_lengths,
                       row_keys=row_keys, seed=seed, horizons=horizons)

    def run_checked(prompt_ids, prompt_lengths, row_keys, seed, check_mask):
        return checked(check_mask, prompt_ids=prompt_ids, prompt_lengths=prompt_lengths,
                       row_keys=row_keys, seed=seed)

    def run_adaptive_checked(prompt_ids, prompt_lengths, row_keys, horizons, seed,
                             check_mask):
        return checked(check_mask, prompt_ids=prompt_ids, prompt_lengths=prompt_lengths,
                       row_keys=row_keys, seed=seed, horizons=horizons)

    if check_panels:
        return run_checked if config.adaptive is None else run_adaptive_checked
    return run if config.adaptive is None else run_adaptive


# Traced once per (batch, prompt bucket) shape on purpose: no retracing warning.
quiet.expect_retracing(_loop_body)


def generate(target, prompts, draft=None, k=4, max_new_tokens: int = 128,
             sampling: Optional[sampling_lib.Sampling] = None, seed: int = 0,
             eos_id=_TARGET_DEFAULT, row_keys: Optional[Sequence[int]] = None,
             prompt_lengths=None, jit_compile: Optional[bool] = True,
             strategy: Optional[tf.distribute.Strategy] = None,
             acceptance="exact") -> Generation:
    """Decodes a batch with exact speculative sampling (or autoregressively).

    Args:
      target: the model whose distribution the output follows (a `DecodeModel`).
      prompts: a list of token-id lists (ragged), or an int array [batch, width] together with
        `prompt_lengths`. Encoder input for an encoder-decoder target, prefix otherwise.
      draft: the proposal model; None (or k = 0) decodes autoregressively through the same
        compiled machinery: the baseline every speed-up is measured against.
      k: draft tokens per round; or "auto" (or a `tfspec.AutoDraft`): adaptive draft length
        up to `k_max` (per row by the walltime formula at the measured acceptance, or with
        `draft_cost=None` by Hugging Face's schedule), and autoregressive decoding where
        that measured faster (see `tfspec.adaptive`).
      max_new_tokens: tokens to generate per row at most.
      sampling: `Sampling` applied identically to target and draft; default temperature 1.
      seed: request seed. A row's tokens are a function of (seed, row content, row key) and
        the call's shape (batch size, prompt bucket): the other rows' contents never change
        them. Across shapes, kernels round differently (one row vs many, other prompt
        widths), and at temperature > 0 a token whose uniform draw falls within rounding
        of a CDF boundary can flip (embedded pair, T = 1, 64 tokens: 1-5 of 128 rows
        differ between batch sizes 1, 2, 8 and 32). For bit-identical rows across
        requests, decode at one batch size and bucket, as `pipelines.generation` does.
      eos_id: stop id; defaults to the target's; None disables stopping.
      row_keys: optional per-row integers for the random streams (default: row index).
      prompt_lengths: int [batch] when `prompts` is an array.
      jit_compile: True = one XLA program; False = tf.function graph; None = eager.
      strategy: a `tf.distribute.Strategy`; the batch is split across its replicas.
      acceptance: "exact" (the default and the only distribution-preserving rule), or an
        explicit opt-in to Medusa's typical acceptance: "typical" (epsilon 0.09, delta 0.3)
        or a `tfspec.TypicalAcceptance(epsilon, delta)`. Typical acceptance drafts the
        draft's argmax tokens and keeps a draft d whenever the target's p(d) > min(epsilon,
        delta * exp(-H(p))) (`tfspec.acceptance.typical_accept`): longer accepted runs, but
        above temperature 0 the output does NOT follow the target's distribution. At
        temperature 0 it runs the exact greedy loop (identical tokens).

    Returns:
      A `Generation` with numpy `tokens`, `lengths`, `stats` and the `acceptance` rule.
    """
    return _generate(target, prompts, draft=draft, k=k, max_new_tokens=max_new_tokens,
                     sampling=sampling, seed=seed, eos_id=eos_id, row_keys=row_keys,
                     prompt_lengths=prompt_lengths, jit_compile=jit_compile,
                     strategy=strategy, acceptance=acceptance)


def _generate(target, prompts, draft=None, k=4, max_new_tokens: int = 128,
              sampling: Optional[sampling_lib.Sampling] = None, seed: int = 0,
              eos_id=_TARGET_DEFAULT, row_keys: Optional[Sequence[int]] = None,
              prompt_lengths=None, jit_compile: Optional[bool] = True,
              strategy: Optional[tf.distribute.Strategy] = None,
              acceptance="exact", accept_fn=None, draft_sample_fn=None) -> Generation:
    """`generate` with the acceptance rule and the draft sampler as arguments.

    Private: the only callers that replace the rules are the power checks of the exactness
    tests, through `tfspec.testing.generate_with_rules`. `accept_fn` / `draft_sample_fn`
    None: those of `acceptance` (exact: `acceptance.accept` and
    `sampling.sample_categorical`; typical at temperature > 0: its rule and
    `acceptance.draft_argmax`); given, they replace them.
    """
    sampling = sampling_lib.Sampling() if sampling is None else sampling
    if not isinstance(sampling, sampling_lib.Sampling):
        raise ValueError(f"sampling must be a tfspec.Sampling, got {type(sampling).__name__}")
    typical = acceptance_lib.resolve(acceptance)
    rule = acceptance_lib.EXACT if typical is None else acceptance_lib.TYPICAL
    # Greedy decoding takes the exact greedy path whatever the rule: typical acceptance on
    # one-hot distributions is that rule, and the same compiled loop serves both.
    if typical is not None and not sampling.greedy:
        accept_fn = accept_fn or typical.accept_fn
        draft_sample_fn = draft_sample_fn or acceptance_lib.draft_argmax
    accept_fn = accept_fn or acceptance_lib.accept
    draft_sample_fn = draft_sample_fn or sampling_lib.sample_categorical
    auto = adaptive_lib.resolve(k)
    if auto is not None:
        k = auto.k_max
    else:
        try:
            valid = int(k) == k and k >= 0
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise ValueError(f'k must be a non-negative integer (0 = autoregressive) or '
                             f'"auto", got {k!r}')
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens}")
    k = int(k) if draft is not None else 0
    if k == 0:
        draft, auto = None, None
    if draft is not None:
        if isinstance(draft, prompt_lookup.PromptLookup) and draft.vocab_size is None:
            draft = _adopted_prompt_lookup(draft, target.vocab_size)
        if draft.vocab_size != target.vocab_size:
            raise ValueError(f"target and draft must share the vocabulary: target vocab_size "
                             f"{target.vocab_size} != draft vocab_size {draft.vocab_size}")
        if decoding.uses_target_features(draft) or decoding.reads_target_encoder(draft):
            draft.bind(target)  # Refuses, in one line, a target it was not trained for.
    if eos_id is _TARGET_DEFAULT:
        eos_id = target.eos_id
    if decoding.draft_vocabulary(target) is not None and draft is not None:
        raise ValueError("the target has a draft vocabulary (set_draft_vocabulary), so it "
                         "scores only some tokens: decode it alone (k=0), or call "
                         "target.set_draft_vocabulary(None) to verify drafts with it")
    if eos_id is not None and not 0 <= int(eos_id) < target.vocab_size:
        raise ValueError(f"eos_id {eos_id} is outside the vocabulary [0, {target.vocab_size})")

    prompt_ids, lengths = _prompt_array(prompts, prompt_lengths, target.pad_id)
    # Checked before anything is allocated: max_new_tokens=10**7 would otherwise try to
    # allocate tens of GiB of KV cache and fail deep inside XLA.
    memory.check_decode_request(target, draft, prompt_ids.shape[0], max_new_tokens, k)
    _check_tokens(prompt_ids, lengths, target.vocab_size)
    limit = target.max_prompt_length
    if limit is not None and lengths.max() > limit:
        row = int(np.argmax(lengths))
        raise ValueError(f"prompt {row} has {int(lengths[row])} tokens, more than the target's "
                         f"limit of {limit}; truncate it or use a model with a longer limit")
    batch = prompt_ids.shape[0]
    if row_keys is None:
        keys = np.arange(batch, dtype=np.int64)
    else:
        keys = np.asarray(row_keys, dtype=np.int64).reshape(-1)
        if keys.shape[0] != batch:
            raise ValueError(f"row_keys has {keys.shape[0]} entries for {batch} prompts")

    mode, controller, shape = None, None, None
    if auto is not None:
        controller = adaptive_lib.controller(target, draft, sampling, auto,
                                             acceptance=typical)
        shape = (batch, prompt_ids.shape[1], int(max_new_tokens))
        mode = controller.choose(shape)
    loop_k, loop_draft = k, draft
    if mode == adaptive_lib.AUTOREGRESSIVE:
        loop_k, loop_draft = 0, None
    elif mode == adaptive_lib.SPECULATIVE:
        loop_k = controller.window()  # <= k_max: see `Controller.window`.
    # A window of 1 leaves nothing to adapt: a row's horizon lies in [1, window] and a
    # confidence stop comes after a draft, so every live row drafts exactly one token a
    # round, as fixed k = 1 does. That loop skips the per-row horizon bookkeeping: auto
    # without fallback took 1.043x fixed k = 1's time per request in the adaptive loop,
    # 1.014x in this one (embedded pair, T = 1, the bench pool's 8 prompts, the same
    # tokens, interleaved, 6 repeats).
    adaptive_loop = mode == adaptive_lib.SPECULATIVE and loop_k > 1
    config = decoding.LoopConfig(
        k=loop_k, max_new_tokens=int(max_new_tokens), sampling=sampling,
        eos_id=None if eos_id is None else int(eos_id),
        start_id=int(getattr(target, "decoder_start_id", target.pad_id)),
        adaptive=(decoding.Adaptive(confidence=float(auto.confidence),
                                    draft_cost=(None if auto.draft_cost is None
                                                else float(auto.draft_cost)))
                  if adaptive_loop else None))
    split = strategy is not None and strategy.num_replicas_in_sync > 1
    # The kernel panels must equal the weights when a program's result is used. Compiled
    # programs check them themselves (`PanelCache.current`, a pass over the weights inside
    # the program instead of a call of its own before it: 4-5 ms per request of the
    # embedded target, whose 79 MB of float32 kernels come from DRAM), and in the rare call
    # whose weights changed since the last packing, the panels are re-packed and the call
    # runs again; except for frozen models (`tfspec.freeze_weights`), whose weights are
    # declared final. A model's first call (and any after a panel switch or a dropped
    # cache) packs them here first, so that the one program per shape is traced with its
    # panels.
    check_panels = bool(jit_compile) and not split
    if jit_compile and not (check_panels and _panels_refreshed(target, loop_draft)):
        _refresh_decode_panels(target, loop_draft)
    run = _loop_fn(target, loop_draft, config, jit_compile, accept_fn, draft_sample_fn,
                   check_panels)
    batched = [tf.constant(prompt_ids, tf.int32), tf.constant(lengths, tf.int32),
               tf.constant(keys, tf.int64)]
    if config.adaptive is not None:
        # Built on the host: an eager Fill op cost 0.5-6 ms per request right after a
        # decode (measured in `evals.run`), a constant ~0.2 ms.
        batched.append(tf.constant(np.full([batch], controller.horizon, np.int32)))
    seed_tensor = tf.constant(seed, tf.int64)
    args = batched + [seed_tensor]
    if check_panels:  # check_mask, bool [2]: the target's panels, the draft side's.
        args.append(tf.constant([not frozen.is_frozen(target),
                                 not frozen.is_frozen(loop_draft)]))
    traces = _tracing_count(run)
    start = time.perf_counter()
    if split:
        distribute_lib.check_placement(strategy, target, "target")
        if loop_draft is not None:
            distribute_lib.check_placement(strategy, loop_draft, "draft")
        out = distribute_lib.run_split(strategy, run, batched, seed_tensor)
    else:
        out = {name: value.numpy()
               for name, value in _call_loop(run, args).items()}
    stale = check_panels and not bool(out.pop("panels_current"))
    if stale:  # The weights changed since the panels were packed: re-pack, run again.
        _refresh_decode_panels(target, loop_draft)
        run = _loop_fn(target, loop_draft, config, jit_compile, accept_fn, draft_sample_fn,
                       check_panels)
        out = {name: value.numpy()
               for name, value in _call_loop(run, args).items()
               if name != "panels_current"}
    seconds = time.perf_counter() - start
    if controller is not None:
        speculative = mode == adaptive_lib.SPECULATIVE
        horizons = out["horizon"] if adaptive_loop else np.ones([batch], np.int32)
        controller.record(shape, mode, seconds, int(out["lengths"].sum()),
                          compiled=stale or _tracing_count(run) != traces,
                          final_horizons=(horizons[~_finished_early(out)]
                                          if speculative else None),
                          overlap=((float(np.sum(out["beta_sum"])),
                                    float(np.sum(out["verified"]))) if speculative else None))
        # The same statistics shape in every call (k_max positions), so calls of either
        # mode and any window concatenate.
        per_position = np.zeros([batch, k], np.int32)
        per_position[:, :loop_k] = out["accepted_per_position"][:, :loop_k]
        out["accepted_per_position"] = per_position

    out_lengths = out["lengths"].astype(np.int32)
    tokens = out["out_ids"][:, 1:max_new_tokens + 1].astype(np.int32)
    tokens = np.where(np.arange(max_new_tokens)[None, :] < out_lengths[:, None], tokens,
                      target.pad_id).astype(np.int32)
    stats = stats_lib.DecodeStats(
        rounds=out["rounds"], drafted=out["drafted"], accepted=out["accepted"],
        verified=out["verified"], accepted_per_position=out["accepted_per_position"],
        beta_sum=out["beta_sum"], tokens=out_lengths)
    return Generation(tokens=tokens, lengths=out_lengths, stats=stats, mode=mode,
                      acceptance=rule)


# {compiled loop (`tf.function`): {input shapes and dtypes: its ConcreteFunction}}; weak
# keys, so a loop dropped with its models takes its concrete functions with it.
_CONCRETE: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _call_loop(run, args: Sequence[tf.Tensor]):
    """`run(*args)`, for a compiled loop through the concrete function of these input
    shapes and dtypes (traced on first use, as `run(*args)` would trace it).

    Why: a `tf.function` call canonicalizes its arguments and looks its trace up by a
    function type that hashes every captured variable, on every call; a concrete function
    is called directly. An eager loop (a Python function) is called as it is.
    """
    get_concrete = getattr(run, "get_concrete_function", None)
    if get_concrete is None:
        return run(*args)
    table = _CONCRETE.setdefault(run, {})
    signature = tuple((tuple(a.shape), a.dtype) for a in args)
    concrete = table.get(signature)
    if concrete is None:
        concrete = table[signature] = get_concrete(*args)
    return concrete(*args)


def _tracing_count(fn) -> Optional[int]:
    """How often a `tf.function` traced (None for an eager function): a change across a
    call means the call compiled, so its time is not a decode time."""
    count = getattr(fn, "experimental_get_tracing_count", None)
    return count() if count is not None else None


def _finished_early(out) -> np.ndarray:
    """bool [batch]: rows that ran no round (nothing to learn a horizon from)."""
    return np.asarray(out["rounds"]) == 0


# {model: kernels.panel_epoch() at its last refresh by `_refresh_decode_panels`}.
_REFRESHED: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()


def _refresh_decode_panels(*models) -> None:
    """Brings each model's `tfspec.kernels` panels up to date with its weights before a
    compiled loop reads them (T5 models on CPU; other models have none)."""
    for model in models:
        refresh = getattr(model, "refresh_decode_panels", None)
        if refresh is not None:
            refresh()
            _REFRESHED[model] = kernels.panel_epoch()


def _panels_refreshed(*models) -> bool:
    """Whether every model with panels was refreshed here under the current
    `kernels.panel_epoch()` (so its caches exist, and the panels differ from the weights
    only if the weights changed, which the compiled loop then detects)."""
    epoch = kernels.panel_epoch()
    return all(_REFRESHED.get(model) == epoch for model in models
               if model is not None and hasattr(model, "refresh_decode_panels"))


_ADOPTED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _adopted_prompt_lookup(draft, vocab_size: int):
    """One bound copy per (draft, vocab) so compiled loops are reused across calls."""
    per_draft = _ADOPTED.setdefault(draft, {})
    if vocab_size not in per_draft:
        per_draft[vocab_size] = draft.with_vocab_size(vocab_size)
    return per_draft[vocab_size]
