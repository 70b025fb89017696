"""Input validation of `tfspec.generate` and the shape of its result."""

import contextlib
import gc
import inspect
import weakref

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import generation
from tfspec.models.ngram import NGram
from tfspec.models.prompt_lookup import PromptLookup


def _ngram(vocab=6, eos_id=None):
    return NGram(np.log(np.full([vocab, vocab], 1.0 / vocab)), eos_id=eos_id)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompts=[[1, 2], []]), "prompt 1 is empty"),
    (dict(prompts=[]), "prompts is empty"),
    (dict(prompts=[[1, 9]]), "outside the vocabulary"),
    (dict(k=-1), "k must be a non-negative integer"),
    (dict(max_new_tokens=0), "max_new_tokens must be a positive integer"),
    (dict(eos_id=99), "eos_id 99 is outside the vocabulary"),
    (dict(row_keys=[1, 2, 3]), "row_keys has 3 entries for 1 prompts"),
    (dict(sampling="greedy"), "sampling must be a tfspec.Sampling"),
    (dict(draft=_ngram(vocab=7)), "target vocab_size 6 != draft vocab_size 7"),
    (dict(prompts=[[1, 2], [5.7, 9.2]]), r"prompt 1 has a token id that is not an integer "
                                         r"\(5.7 at position 0\)"),
    (dict(prompts=[[1, float("nan")]]), "prompt 0 has a token id that is not an integer"),
    (dict(prompts=[["a", "b"]]), "prompt 0 has token ids of type <U1"),
    (dict(prompts=np.array([[1.5, 2.0]]), prompt_lengths=[2]),
     "prompts has a token id that is not an integer"),
])
def test_bad_input_is_a_clear_value_error(kwargs, message):
    args = dict(prompts=[[1, 2]], draft=_ngram(), k=2, max_new_tokens=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        tfspec.generate(_ngram(), **args)


def test_whole_float_token_ids_are_accepted_as_integers():
    args = dict(draft=_ngram(), k=2, max_new_tokens=4, seed=3)
    as_float = tfspec.generate(_ngram(), [[1.0, 2.0]], **args)
    as_int = tfspec.generate(_ngram(), [[1, 2]], **args)
    np.testing.assert_array_equal(as_float.tokens, as_int.tokens)


def test_prompt_longer_than_model_limit():
    class Limited(NGram):
        max_prompt_length = 3
    target = Limited(np.log(np.full([4, 4], 0.25)))
    with pytest.raises(ValueError, match="prompt 0 has 5 tokens, more than the target's limit of 3"):
        tfspec.generate(target, [[1, 1, 1, 1, 1]], max_new_tokens=2)


def test_array_prompts_with_lengths_equal_ragged_prompts():
    target = _ngram()
    ragged = tfspec.generate(target, [[1, 2, 3], [4]], max_new_tokens=5, seed=1)
    array = tfspec.generate(target, np.array([[1, 2, 3], [4, 0, 0]]), prompt_lengths=[3, 1],
                            max_new_tokens=5, seed=1)
    np.testing.assert_array_equal(ragged.tokens, array.tokens)


def test_result_shapes_and_autoregressive_stats():
    gen = tfspec.generate(_ngram(), [[1], [2], [3]], max_new_tokens=7, k=5)  # no draft: AR
    assert gen.tokens.shape == (3, 7) and gen.tokens.dtype == np.int32
    np.testing.assert_array_equal(gen.lengths, [7, 7, 7])
    np.testing.assert_array_equal(gen.stats.rounds, [7, 7, 7])
    assert gen.stats.drafted.sum() == 0 and np.isnan(gen.stats.acceptance_rate)
    assert gen.stats.mean_tokens_per_round == 1.0


def test_prompt_lookup_adopts_target_vocab():
    gen = tfspec.generate(_ngram(), [[1, 2, 1, 2, 1]], draft=PromptLookup(), k=3,
                          max_new_tokens=6)
    assert gen.stats.drafted.sum() > 0


def test_one_trace_per_shape_bucket():
    from tfspec import generation as generate_lib
    target, draft = _ngram(), _ngram()
    kwargs = dict(draft=draft, k=2, max_new_tokens=4)
    tfspec.generate(target, [[1, 2, 3]], seed=0, **kwargs)
    (fn,) = generate_lib.compiled_loops(target)
    # Same batch, other prompt lengths within the bucket of 8, other seeds: no retrace.
    tfspec.generate(target, [[1, 2, 3, 4, 5, 1]], seed=1, **kwargs)
    tfspec.generate(target, [[2]], seed=2, row_keys=[9], **kwargs)
    assert fn.experimental_get_tracing_count() == 1
    # A longer prompt moves to the next bucket: one more trace.
    tfspec.generate(target, [[1] * 9], seed=0, **kwargs)
    assert fn.experimental_get_tracing_count() == 2
    # Each trace is called directly, through its concrete function (`_call_loop`).
    assert len(generate_lib._CONCRETE[fn]) == 2  # pylint: disable=protected-access


@pytest.mark.parametrize("width,bucket", [(1, 8), (8, 8), (9, 12), (12, 12), (13, 16),
                                          (17, 24), (25, 32), (33, 48), (49, 64), (65, 96),
                                          (236, 256), (309, 384), (385, 512), (513, 768)])
def test_prompt_buckets_are_powers_of_two_and_their_midpoints(width, bucket):
    assert generation.prompt_bucket(width) == bucket


def _tiny_t5(d_model, seed):
    from tfspec.models import T5, T5Config
    config = T5Config(vocab_size=16, d_model=d_model, d_kv=4, d_ff=2 * d_model, num_layers=1,
                      num_decoder_layers=1, num_heads=2, relative_attention_num_buckets=8,
                      relative_attention_max_distance=16, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False, layer_norm_epsilon=1e-6, pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    return T5(config, seed=seed)


@pytest.mark.parametrize("mirrored", [False, True], ids=["default", "mirrored"])
def test_dropped_models_and_their_compiled_loops_are_freed(mirrored):
    """Several T5 pairs (graph) and NGram pairs (XLA), each decoded speculatively and
    autoregressively; once the caller drops them, gc frees the models and every compiled
    loop (with a strategy, also the replicated step that calls it)."""
    strategy = None
    if mirrored:
        cpus = tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    # Other tests' models (module fixtures) may hold entries in this process: count ours.
    # Collect first: an earlier test's dropped models would otherwise be freed by this
    # test's gc.collect() below and make the count fall below its start.
    gc.collect()
    entries_before = len(generation._COMPILED)  # pylint: disable=protected-access
    models, loop_refs = [], []
    for i in range(1 if mirrored else 2):  # Mirrored compiles cost more: one round of 4.
        with strategy.scope() if strategy else contextlib.nullcontext():
            target, draft = _tiny_t5(8, seed=i), _tiny_t5(4, seed=10 + i)
        ngram_target, ngram_draft = _ngram(16), _ngram(16)
        for tgt, dft, jit_compile in ((target, draft, False),
                                      (ngram_target, ngram_draft, True)):
            for k in (0, 2):
                gen = tfspec.generate(tgt, [[3, 4, 5], [6]], draft=dft, k=k,
                                      max_new_tokens=3, jit_compile=jit_compile,
                                      strategy=strategy)
                assert gen.lengths.tolist() == [3, 3]
            loops = generation.compiled_loops(tgt)
            assert len(loops) == 2  # Speculative and autoregressive.
            loop_refs += [weakref.ref(fn) for fn in loops]
        models += [target, draft, ngram_target, ngram_draft]
    refs = [weakref.ref(m) for m in models]
    gc.collect()
    assert all(r() is not None for r in loop_refs)  # The caller still holds the models.
    del models, target, draft, ngram_target, ngram_draft, tgt, dft, loops, gen
    gc.collect()
    alive_models = sum(r() is not None for r in refs)
    alive_loops = sum(r() is not None for r in loop_refs)
    assert (alive_models, alive_loops) == (0, 0), (
        f"{alive_models} of {len(refs)} models and {alive_loops} of {len(loop_refs)} "
        f"compiled loops still alive")
    assert len(generation._COMPILED) == entries_before  # pylint: disable=protected-access


def test_a_kept_target_keeps_its_loops_and_drops_those_of_a_dropped_draft():
    target, draft = _ngram(16), _ngram(16)
    kwargs = dict(k=2, max_new_tokens=3)
    tfspec.generate(target, [[3, 4]], **kwargs)
    tfspec.generate(target, [[3, 4]], draft=draft, **kwargs)
    loops = [weakref.ref(fn) for fn in generation.compiled_loops(target)]
    assert len(loops) == 2
    del draft
    gc.collect()
    assert [r() is not None for r in loops] == [True, False]  # AR kept, speculative freed.
    assert generation.compiled_loops(target) == [loops[0]()]


def test_public_generate_has_no_test_hooks():
    assert not {"accept_fn", "draft_sample_fn"} & set(
        inspect.signature(tfspec.generate).parameters)
    with pytest.raises(TypeError):
        tfspec.generate(_ngram(), [[1, 2]], accept_fn=None)  # pylint: disable=E1123


def test_generate_with_rules_defaults_to_the_exact_rules():
    from tfspec import testing
    kwargs = dict(draft=_ngram(), k=2, max_new_tokens=6, sampling=tfspec.Sampling(1.0), seed=3)
    expected = tfspec.generate(_ngram(), [[1, 2], [3]], **kwargs)
    got = testing.generate_with_rules(_ngram(), [[1, 2], [3]], **kwargs)
    np.testing.assert_array_equal(expected.tokens, got.tokens)
    np.testing.assert_array_equal(expected.stats.accepted, got.stats.accepted)


# ------------------------------------------------------------ acceptance="exact"|"typical"


@pytest.mark.parametrize("acceptance", ["medusa", "Typical", None, 0.09,
                                        tfspec.Sampling()])
def test_an_unknown_acceptance_is_a_one_line_value_error_naming_the_choices(acceptance):
    with pytest.raises(ValueError, match='acceptance must be "exact", "typical" or a '
                                         'tfspec.TypicalAcceptance') as info:
        tfspec.generate(_ngram(), [[1, 2]], draft=_ngram(), k=2, max_new_tokens=3,
                        acceptance=acceptance)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("acceptance, rule", [
    ("exact", "exact"), ("typical", "typical"),
    (tfspec.TypicalAcceptance(epsilon=0.2, delta=0.5), "typical")])
def test_generation_says_which_rule_ran(acceptance, rule):
    gen = tfspec.generate(_ngram(), [[1, 2]], draft=_ngram(), k=2, max_new_tokens=3,
                          acceptance=acceptance)
    assert gen.acceptance == rule
    assert tfspec.generate(_ngram(), [[1, 2]], max_new_tokens=3).acceptance == "exact"


def _peaked_ngram(seed, vocab=6):
    rng = np.random.RandomState(seed)
    return NGram(np.log(rng.dirichlet(np.full(vocab, 0.5), size=vocab)).astype(np.float32))


@pytest.mark.parametrize("jit_compile", [True, None], ids=["xla", "eager"])
def test_greedy_typical_acceptance_is_the_exact_greedy_loop(jit_compile):
    """Temperature 0: the same tokens and counters as the exact rule, from the same
    compiled loop (no program of its own)."""
    target, draft = _peaked_ngram(1), _peaked_ngram(2)
    kwargs = dict(draft=draft, k=3, max_new_tokens=12, sampling=tfspec.Sampling(0.0),
                  jit_compile=jit_compile)
    prompts = [[1, 2], [3], [4, 5, 0]]
    exact = tfspec.generate(target, prompts, **kwargs)
    loops = len(generation.compiled_loops(target))
    typical = tfspec.generate(target, prompts, acceptance="typical", **kwargs)
    assert typical.acceptance == "typical"
    np.testing.assert_array_equal(exact.tokens, typical.tokens)
    np.testing.assert_array_equal(exact.stats.accepted, typical.stats.accepted)
    np.testing.assert_array_equal(exact.stats.rounds, typical.stats.rounds)
    assert len(generation.compiled_loops(target)) == loops


def test_greedy_typical_acceptance_matches_exact_greedy_through_t5_caches():
    target, draft = _tiny_t5(8, seed=3), _tiny_t5(4, seed=13)
    kwargs = dict(draft=draft, k=2, max_new_tokens=8, sampling=tfspec.Sampling(0.0),
                  jit_compile=False, eos_id=None)
    prompts = [[3, 4, 5], [6], [7, 8]]
    exact = tfspec.generate(target, prompts, **kwargs)
    typical = tfspec.generate(target, prompts, acceptance=tfspec.TypicalAcceptance(), **kwargs)
    np.testing.assert_array_equal(exact.tokens, typical.tokens)
    assert typical.stats.drafted.sum() > 0


def test_sampled_typical_acceptance_compiles_once_per_setting_and_accepts_more():
    target = _peaked_ngram(3)
    # The draft is the target flattened (logits / 2): the same argmax everywhere, but a q
    # that the exact rule must often correct, while typical acceptance keeps its argmax.
    draft = NGram(np.log(np.random.RandomState(3).dirichlet(np.full(6, 0.5), size=6))
                  .astype(np.float32) / 2)
    kwargs = dict(draft=draft, k=3, max_new_tokens=16, sampling=tfspec.Sampling(1.0), seed=5)
    prompts = [[1, 2]] * 64
    exact = tfspec.generate(target, prompts, **kwargs)
    loops = len(generation.compiled_loops(target))
    typical = tfspec.generate(target, prompts, acceptance="typical", **kwargs)
    assert len(generation.compiled_loops(target)) == loops + 1
    again = tfspec.generate(target, prompts, acceptance=tfspec.TypicalAcceptance(0.09, 0.3),
                            **kwargs)
    assert len(generation.compiled_loops(target)) == loops + 1  # The same rule object.
    np.testing.assert_array_equal(typical.tokens, again.tokens)
    # Medusa's candidates are the draft's argmax and the test has no uniform: it keeps
    # drafts the exact rule would often reject.
    assert typical.stats.acceptance_rate > exact.stats.acceptance_rate


def test_typical_acceptance_with_auto_draft_length_and_the_test_hooks():
    from tfspec import testing
    from tfspec.testing import wrong_rules
    target, draft = _peaked_ngram(5), _peaked_ngram(6)
    kwargs = dict(draft=draft, max_new_tokens=8, sampling=tfspec.Sampling(1.0), seed=1)
    gen = tfspec.generate(target, [[1, 2]] * 4, k=tfspec.AutoDraft(k_max=2, fallback=False),
                          acceptance="typical", **kwargs)
    assert gen.acceptance == "typical" and gen.mode == "speculative"
    # A hook given explicitly replaces the rule that `acceptance` would pick.
    hooked = testing.generate_with_rules(target, [[1, 2]] * 4, k=2, acceptance="typical",
                                         accept_fn=wrong_rules.inverted_ratio, **kwargs)
    plain = testing.generate_with_rules(target, [[1, 2]] * 4, k=2,
                                        accept_fn=wrong_rules.inverted_ratio,
                                        draft_sample_fn=tfspec.acceptance.draft_argmax,
                                        **kwargs)
    np.testing.assert_array_equal(hooked.tokens, plain.tokens)
