"""The loop driving real (tiny, random) T5 models: greedy identity and mixed drafts.

Every test runs under `--strategy` (tests/conftest.py); the one marked `strategies` runs
under the default and the mirrored strategy in every run."""

import math

import numpy as np
import pytest

import tfspec
from tfspec.models import T5, T5Config, NGram, PromptLookup

VOCAB = 96


def _config(layers, d_model=32, ff="gated-gelu", tie=False):
    return T5Config(vocab_size=VOCAB, d_model=d_model, d_kv=8, d_ff=2 * d_model,
                    num_layers=layers, num_decoder_layers=layers, num_heads=4,
                    relative_attention_num_buckets=8, relative_attention_max_distance=32,
                    feed_forward_proj=ff, tie_word_embeddings=tie, layer_norm_epsilon=1e-6,
                    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


@pytest.fixture(scope="module")
def models(strategy):
    with strategy.scope():  # Each replica reads its own copy of the weights.
        target = T5(_config(2), seed=1)
        related = T5(_config(1, d_model=32), seed=1)     # shares nothing but shapes/seed
        unrelated = T5(_config(1, d_model=16, ff="relu", tie=True), seed=7)
    return target, related, unrelated


def _generate(strategy, *args, **kwargs):
    """`tfspec.generate` under the test's strategy (`--strategy`, tests/conftest.py)."""
    return tfspec.generate(*args, strategy=strategy, **kwargs)


PROMPTS = [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29]]


# Each draft at two of the three k, each k with at least two drafts (8 of the 12 pairs: one
# compile each).
@pytest.mark.parametrize("draft_name, k", [
    ("related", 1), ("related", 8), ("unrelated", 3), ("unrelated", 8),
    ("prompt_lookup", 1), ("prompt_lookup", 3), ("ngram", 3), ("ngram", 8)])
def test_greedy_speculative_equals_greedy_autoregressive(models, k, draft_name, strategy):
    target, related, unrelated = models
    rng = np.random.RandomState(0)
    draft = {"related": related, "unrelated": unrelated, "prompt_lookup": PromptLookup(3),
             "ngram": NGram(np.log(rng.dirichlet(np.ones(VOCAB), size=VOCAB)))}[draft_name]
    greedy = tfspec.Sampling(temperature=0.0)
    ar = _generate(strategy, target, PROMPTS, max_new_tokens=16, sampling=greedy, eos_id=None)
    spec = _generate(strategy, target, PROMPTS, draft=draft, k=k, max_new_tokens=16,
                           sampling=greedy, eos_id=None)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    assert spec.stats.drafted.sum() > 0


def test_sampled_t5_pair_runs_and_is_deterministic(models, strategy):
    target, related, _ = models
    run = lambda: _generate(strategy, target, PROMPTS, draft=related, k=3, max_new_tokens=12,
                            sampling=tfspec.Sampling(0.8, top_p=0.9), seed=3)
    first, second = run(), run()
    np.testing.assert_array_equal(first.tokens, second.tokens)
    # These random models' top-p sets never meet (overlap beta = 0): a draft outside the
    # target's support must never be accepted, whatever the uniforms.
    stats = first.stats
    assert stats.drafted.sum() > 0 and (stats.beta_sum == 0).all()
    assert stats.accepted.sum() == 0
    assert (first.lengths >= 1).all()


def test_t5_row_does_not_depend_on_its_companions(models, strategy):
    """At one call shape (batch 4, one prompt width), a row's tokens are the same whatever
    the other rows hold: the promise of `generate` (across shapes, rounding may differ)."""
    target, related, _ = models
    kwargs = dict(draft=related, k=2, max_new_tokens=10, sampling=tfspec.Sampling(1.0),
                  seed=5)

    def row_of(companions, keys):
        rows = companions + [PROMPTS[3]]
        ids = np.zeros([4, 16], np.int32)
        for i, prompt in enumerate(rows):
            ids[i, :len(prompt)] = prompt
        gen = _generate(strategy, target, ids, prompt_lengths=[len(p) for p in rows],
                        row_keys=keys + [10], **kwargs)
        return gen.row_tokens(3)

    reference = row_of(PROMPTS[:3], [7, 8, 9])
    assert row_of([PROMPTS[2], [40, 41], [50] * 12], [3, 4, 5]) == reference
    assert row_of([PROMPTS[3]] * 3, [10, 10, 10]) == reference


# --- Draft == target: every round accepts all k drafts, so every round after the first
# needs the draft catch-up (the draft never decoded its last draft d_k, nor the bonus token).
# A catch-up that leaves a wrong or missing entry in the draft's KV cache makes the draft
# disagree with the target, which shows as acceptance < 1 and extra rounds.

MAX_NEW = 16


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_draft_equal_to_target_accepts_every_draft(models, k, strategy):
    """Greedy, batch of 4 mixed-length prompts, draft is the target object itself: the
    tokens equal greedy autoregressive decoding and every row takes exactly
    ceil(MAX_NEW / (k + 1)) rounds with every draft accepted."""
    target = models[0]
    greedy = tfspec.Sampling(temperature=0.0)
    ar = _generate(strategy, target, PROMPTS, max_new_tokens=MAX_NEW, sampling=greedy,
                         eos_id=None)
    spec = _generate(strategy, target, PROMPTS, draft=target, k=k, max_new_tokens=MAX_NEW,
                           sampling=greedy, eos_id=None)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    assert spec.stats.acceptance_rate == 1.0
    np.testing.assert_array_equal(spec.stats.rounds, math.ceil(MAX_NEW / (k + 1)))
    np.testing.assert_array_equal(spec.stats.accepted, spec.stats.drafted)


@pytest.mark.parametrize("k", [1, 4])
def test_sampled_draft_equal_to_target_accepts_every_draft(models, k, strategy):
    """Temperature 1, draft is the target object itself: p / q = 1 for every draft, so the
    rule accepts every one of them. Sampling is more sensitive than greedy: any change of
    the draft's distribution (e.g. a catch-up that skips a position) lowers acceptance,
    whereas greedy only notices when the argmax moves."""
    target = models[0]
    prompts = PROMPTS * 2
    spec = _generate(strategy, target, prompts, draft=target, k=k, max_new_tokens=MAX_NEW,
                           sampling=tfspec.Sampling(temperature=1.0), seed=4,
                           row_keys=range(len(prompts)), eos_id=None)
    assert spec.stats.acceptance_rate == 1.0
    np.testing.assert_array_equal(spec.stats.rounds, math.ceil(MAX_NEW / (k + 1)))
    np.testing.assert_array_equal(spec.lengths, MAX_NEW)


@pytest.mark.strategies
def test_greedy_parity_and_full_acceptance_under_every_strategy(models, strategy):
    """The CI part of the strategy matrix (default and mirrored over two CPU devices): with
    the batch split across replicas, a draft equal to the target gives the greedy
    autoregressive tokens and accepts every draft (which needs a correct draft catch-up on
    every replica). Two compiled loops only, to keep CI short."""
    target = models[0]
    greedy = tfspec.Sampling(temperature=0.0)
    kwargs = dict(max_new_tokens=MAX_NEW, sampling=greedy, eos_id=None)
    ar = _generate(strategy, target, PROMPTS, **kwargs)
    same = _generate(strategy, target, PROMPTS, draft=target, k=3, **kwargs)
    np.testing.assert_array_equal(same.tokens, ar.tokens)
    np.testing.assert_array_equal(same.stats.accepted, same.stats.drafted)
    np.testing.assert_array_equal(same.stats.rounds, math.ceil(MAX_NEW / 4))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("drop_one", [False, True], ids=["covers", "misses_one"])
def test_greedy_draft_vocabulary(models, k, drop_one, strategy):
    """A copy of the target restricted to a draft vocabulary: when the vocabulary holds
    every token greedy decoding emits, every draft is accepted; when it misses one, that
    token is never drafted, the drafts at it are rejected, and the tokens stay identical
    to greedy autoregressive decoding either way."""
    target = models[0]
    greedy = tfspec.Sampling(temperature=0.0)
    ar = _generate(strategy, target, PROMPTS, max_new_tokens=MAX_NEW, sampling=greedy,
                   eos_id=None)
    # The last round drafts up to k tokens past MAX_NEW: the vocabulary must cover those.
    longer = _generate(strategy, target, PROMPTS, max_new_tokens=MAX_NEW + k, sampling=greedy,
                       eos_id=None)
    emitted = np.unique(longer.tokens)
    # The most frequent emitted token (not pad/EOS, which are always kept): it also sits at
    # drafted positions, not only at the bonus positions of full-acceptance rounds.
    values, counts = np.unique(ar.tokens[ar.tokens > 1], return_counts=True)
    missed = int(values[np.argmax(counts)])
    with strategy.scope():
        draft = T5(_config(2), seed=1)  # The target's weights, another object.
    draft.set_draft_vocabulary(emitted[emitted != missed] if drop_one else emitted)
    assert draft.draft_vocab_ids.size < VOCAB
    spec = _generate(strategy, target, PROMPTS, draft=draft, k=k, max_new_tokens=MAX_NEW,
                     sampling=greedy, eos_id=None)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    if drop_one:
        assert 0 < spec.stats.acceptance_rate < 1.0
    else:
        assert spec.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("jit_compile", [True, None], ids=["xla", "eager"])
def test_a_model_with_a_draft_vocabulary_decodes_alone_within_it(models, jit_compile):
    """Decoded alone (k = 0: how benchmarks time a draft), a model with a draft vocabulary
    emits its argmax (greedy) or samples (T = 1) among those tokens only; as the target of
    speculative decoding it is refused."""
    target = models[0]
    restricted = T5(_config(2), seed=1).set_draft_vocabulary([5, 7, 20, 41, 69, 94])
    np.testing.assert_array_equal(restricted.draft_vocab_ids, [1, 5, 7, 20, 41, 69, 94])
    greedy = tfspec.generate(restricted, PROMPTS, max_new_tokens=8, eos_id=None,
                             sampling=tfspec.Sampling(0.0), jit_compile=jit_compile)
    prompt_ids = np.zeros([len(PROMPTS), max(map(len, PROMPTS))], np.int32)
    for i, prompt in enumerate(PROMPTS):
        prompt_ids[i, :len(prompt)] = prompt
    decoder_ids = np.concatenate([np.zeros([len(PROMPTS), 1], np.int32), greedy.tokens], 1)
    logits = restricted.forward(prompt_ids, [len(p) for p in PROMPTS], decoder_ids).numpy()
    ids = restricted.draft_vocab_ids
    np.testing.assert_array_equal(greedy.tokens, ids[logits[:, :-1, ids].argmax(-1)])
    sampled = tfspec.generate(restricted, PROMPTS * 8, max_new_tokens=8, eos_id=None,
                              sampling=tfspec.Sampling(1.0), jit_compile=jit_compile)
    assert set(sampled.tokens.ravel().tolist()) <= set(ids.tolist())
    assert len(set(sampled.tokens.ravel().tolist())) > 3
    with pytest.raises(ValueError, match="the target has a draft vocabulary"):
        tfspec.generate(restricted, PROMPTS, draft=target, k=2, max_new_tokens=2)


def test_draft_vocabulary_is_validated():
    target = T5(_config(1), seed=3)
    target.set_draft_vocabulary([5, 7])
    np.testing.assert_array_equal(target.draft_vocab_ids, [1, 5, 7])  # + EOS
    assert target.set_draft_vocabulary(None).draft_vocab_ids is None
    for bad, message in [([VOCAB], "must lie in"), ([3, 3], "distinct"), ([], "non-empty"),
                         ([1.5], "integer")]:
        with pytest.raises(ValueError, match=message):
            target.set_draft_vocabulary(bad)
