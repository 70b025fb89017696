"""Tests of tfspec.models.feature_draft: the EAGLE-style `FeatureDraft` of a T5 target.

What is checked here, beyond the config and the checkpoint layout:

- The cached decode of the draft equals its uncached training path (`rollout`), pass by
  pass: pass 1 is what draft step 0 (and the catch-up) computes from the target's true
  features, and pass s >= 2 is draft step s - 1 of a round, whose cache holds true-feature
  entries up to the round's start and the draft's own entries after it. A wrong mask in
  `rollout` trains the draft for rounds that never happen; nothing else would notice.
- The feature hand-off of the loop: what the draft receives at every step of every round,
  and what its cache holds after the round, recorded in eager mode and compared with the
  target's uncached features of the committed sequence. A hand-off off by one position
  stays exact (any q is allowed), so only acceptance would show it; this test shows it
  directly. A trained draft then checks, more coarsely, the same end to end: its
  acceptance while decoding equals what its training metric predicts.
- Greedy identity through `tfspec.generate` for several draft shapes, k, batch layouts and
  execution modes.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import adaptive
from tfspec import sampling as sampling_lib
from tfspec import testing
from tfspec.models import T5, T5Config
from tfspec.models import feature_draft as fd
from tfspec.models.feature_draft import FeatureDraft, FeatureDraftConfig
from tfspec.models.ngram import NGram
from tfspec.testing import exact_reference as ref
from tfspec.training import examples as examples_lib
from tfspec.training import stages
from tfspec.training.feature_draft import FeatureDraftObjective

VOCAB = 32
# Two decoder layers, so that feature layer 0 (after block 0) differs from -1 (the final
# states); small buckets so that ~15 positions reach the logarithmic ones.
TARGET_CONFIG = T5Config(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=24, num_layers=1,
                         num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8,
                         relative_attention_max_distance=16, feed_forward_proj="gated-gelu",
                         tie_word_embeddings=False)
# A tied v1.0 target: its LM head rescales the states (`rescales_states`).
TIED_CONFIG = TARGET_CONFIG.replace(feed_forward_proj="relu", tie_word_embeddings=True)
REDUCED = 20
# Draft shapes (overrides of `FeatureDraftConfig.for_target`).
DRAFTS = {
    "top": dict(),
    "fused": dict(feature_layers=(0, -1)),
    "top-reduced-nocross": dict(draft_vocab_size=REDUCED, cross_attention=False),
    "fused-reduced": dict(feature_layers=(0, -1), draft_vocab_size=REDUCED, d_ff=40,
                          feed_forward_proj="relu"),
    "fused-reversed-nocross": dict(feature_layers=(-1, 0), cross_attention=False),
}
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
GREEDY = tfspec.Sampling(temperature=0.0)
TOL = 1e-5
# Compiling a loop takes 5-15 s on a busy CPU, an eager loop over these tiny models well
# under one: everything but the XLA cases of the greedy identity test runs eagerly.
EAGER = dict(jit_compile=None)


@pytest.fixture(scope="module")
def target():
    return T5(TARGET_CONFIG, seed=1)


@pytest.fixture(scope="module")
def other_target():
    """The same shapes as `target`, other weights."""
    return T5(TARGET_CONFIG, seed=2)


def _reduced_vocabulary(seed, size=REDUCED):
    """A sorted random draft vocabulary of `size` ids with EOS (1) in it."""
    rng = np.random.default_rng(seed)
    rest = rng.choice(np.delete(np.arange(VOCAB), 1), size=size - 1, replace=False)
    return np.sort(np.append(rest, 1)).astype(np.int32)


def _draft(target, name, seed=2, cls=FeatureDraft, **overrides):
    """A random draft of shape `name` bound to `target` (reduced: a random vocabulary)."""
    config = FeatureDraftConfig.for_target(target, **{**DRAFTS[name], **overrides})
    draft = cls(config, seed=seed).bind(target)
    if not draft.full_vocabulary:
        draft.draft_vocab.assign(_reduced_vocabulary(seed, config.draft_vocab_size))
    return draft


def _padded(prompts):
    """(prompt_ids int32 [B, S] right-padded with 0, lengths int32 [B])."""
    lengths = np.array([len(p) for p in prompts], np.int32)
    ids = np.zeros((len(prompts), lengths.max()), np.int32)
    for row, prompt in enumerate(prompts):
        ids[row, :len(prompt)] = prompt
    return ids, lengths


def _sequence(seed, batch=3, length=12):
    """Random decoder inputs int32 [B, T]: the start id 0, then ids >= 2."""
    ids = np.random.default_rng(seed).integers(2, VOCAB, size=(batch, length)).astype(np.int32)
    ids[:, 0] = 0
    return ids


def _shifted(x):
    """[B, T, D] -> the value of t - 1 at t, zeros at t = 0 (what step t reads)."""
    x = np.asarray(x)
    return np.concatenate([np.zeros_like(x[:, :1]), x[:, :-1]], axis=1)


def _true_inputs(draft, target, prompt_ids, lengths, decoder_ids):
    """The draft's input features from the target's uncached features: float32 [B, T, D],
    entry t = the (projected) target feature of position t - 1, zeros at t = 0."""
    _, features, _ = target.decoder_features(prompt_ids, lengths, decoder_ids,
                                             draft.feature_layers)
    return _shifted(draft.input_features(features).numpy())


def _prepared(draft, target, prompt_ids, lengths, max_length):
    target_context, _ = target.prepare(prompt_ids, lengths, max_length)
    return draft.prepare_with_target(target, target_context, prompt_ids, lengths, max_length)


def _positions(batch, start, width):
    return np.tile(np.arange(start, start + width, dtype=np.int32), (batch, 1))


def _weight_values(draft):
    return {name: np.asarray(variable) for name, (variable, _) in draft.weight_map().items()}


class _Log:
    """A plain holder (a list attribute of a Keras model would be tracked)."""

    def __init__(self):
        self.calls = []


class RecordingDraft(FeatureDraft):
    """Records every decode call: its inputs, the features it predicts, the cache after."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = _Log()

    def decode(self, context, cache, ids, positions, features):
        logits, predicted, cache = super().decode(context, cache, ids, positions, features)
        self.log.calls.append(dict(
            ids=np.asarray(ids), positions=np.asarray(positions),
            features=np.asarray(features), predicted=predicted.numpy(),
            keys=cache.keys.numpy(), values=cache.values.numpy()))
        return logits, predicted, cache


# --------------------------------------------------------------------------------- config

@pytest.mark.parametrize("overrides, match", [
    (dict(draft_vocab_size=0), "draft_vocab_size"),
    (dict(draft_vocab_size=VOCAB + 1), "draft_vocab_size"),
    (dict(feature_layers=(-1, -1)), "distinct"),
    (dict(feature_layers=(0, 1, 0)), "distinct"),
    (dict(feature_layers=()), "distinct"),
])
def test_config_rejects_bad_values(overrides, match):
    values = dict(vocab_size=VOCAB, d_model=16, num_heads=2, d_kv=4, d_ff=24)
    with pytest.raises(ValueError, match=match):
        FeatureDraftConfig(**values, **overrides)


def test_config_defaults_to_the_full_vocabulary():
    config = FeatureDraftConfig(vocab_size=VOCAB, d_model=16, num_heads=2, d_kv=4, d_ff=24)
    assert config.draft_vocab_size == VOCAB and config.feature_layers == (-1,)


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_config_round_trips_through_a_dict_and_json(target, name):
    config = FeatureDraftConfig.for_target(target, target_fingerprint="0123abcd",
                                           target_name="zoo:x", **DRAFTS[name])
    values = config.to_dict()
    assert values["architectures"] == [fd.ARCHITECTURE]
    assert FeatureDraftConfig.from_dict(values) == config
    assert FeatureDraftConfig.from_dict(json.loads(json.dumps(values))) == config
    with pytest.raises(ValueError, match="unknown feature-draft config keys: bogus"):
        FeatureDraftConfig.from_dict({**values, "bogus": 1})


def test_config_for_target_takes_the_targets_shapes():
    tied = T5(TIED_CONFIG, seed=0)
    config = FeatureDraftConfig.for_target(tied, d_ff=7)
    assert (config.vocab_size, config.d_model, config.num_heads, config.d_kv) == (VOCAB, 16,
                                                                                  2, 4)
    assert config.d_ff == 7 and config.feed_forward_proj == "relu"
    assert config.rescales_states and config.eos_token_id == 1


# -------------------------------------------------------------------------------- weights

def _expected_parameters(config: FeatureDraftConfig) -> int:
    d, inner, d_ff = config.d_model, config.num_heads * config.d_kv, config.d_ff
    count = 2 * d * d + 3 * d                        # fuse; feature, embedding, final norms
    if config.feature_layers != (-1,):
        count += len(config.feature_layers) * d * d  # from_target
    count += d + 4 * d * inner                      # self-attention (norm, q, k, v, o)
    count += config.relative_attention_num_buckets * config.num_heads
    if config.cross_attention:
        count += d + 4 * d * inner
    gated = config.feed_forward_proj.startswith("gated")
    count += d + (3 if gated else 2) * d * d_ff      # feed-forward norm, wi(_0, _1), wo
    return count + config.draft_vocab_size          # draft_vocab (int32, not trained)


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_weights_are_the_drafts_own_and_match_the_config(target, name):
    draft = _draft(target, name)
    own = {id(v) for v in draft.weights}
    assert not own & {id(v) for v in target.weights}, "a target variable is the draft's too"
    # Generating (and making the kernel panels, in XLA) does not adopt target weights.
    assert draft.refresh_decode_panels() == fd.kernels.usable_outside_trace()
    tfspec.generate(target, PROMPTS, draft=draft, k=2, max_new_tokens=3, sampling=GREEDY,
                    **EAGER)
    assert {id(v) for v in draft.weights} == own
    assert stages.parameter_count(draft) == _expected_parameters(draft.config)
    # The checkpoint layout names every variable exactly once.
    mapped = [id(variable) for variable, _ in draft.weight_map().values()]
    assert len(mapped) == len(set(mapped)) and set(mapped) == own
    trainable = {id(v) for v in draft.trainable_variables}
    assert trainable == own - {id(draft.draft_vocab)}


# ------------------------------------------------------------------------------ save/load

def _sampled(target, draft, k=2):
    return tfspec.generate(target, PROMPTS, draft=draft, k=k, max_new_tokens=10,
                           sampling=tfspec.Sampling(temperature=1.0), seed=4, **EAGER)


@pytest.mark.parametrize("name", ["top", "fused-reduced"])
def test_save_load_round_trip_is_exact_in_float32(target, name, tmp_path):
    draft = _draft(target, name)
    tfspec.save_model(draft, tmp_path)
    with open(os.path.join(tmp_path, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["dtype"] == "float32"
    loaded = tfspec.load_model(tmp_path)
    assert isinstance(loaded, FeatureDraft) and loaded.target is None
    assert loaded.config == draft.config
    want = _weight_values(draft)
    got = _weight_values(loaded)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert loaded.draft_vocab.dtype == "int32"
    # Generation is identical: tfspec.generate binds the loaded draft to the target.
    greedy = [tfspec.generate(target, PROMPTS, draft=d, k=3, max_new_tokens=10,
                              sampling=GREEDY, **EAGER) for d in (draft, loaded)]
    np.testing.assert_array_equal(greedy[0].tokens, greedy[1].tokens)
    assert loaded.target is target
    sampled = [_sampled(target, d) for d in (draft, loaded)]
    np.testing.assert_array_equal(sampled[0].tokens, sampled[1].tokens)
    np.testing.assert_array_equal(sampled[0].stats.accepted, sampled[1].stats.accepted)


def test_bfloat16_export_loads_back_bfloat16_rounded(target, tmp_path):
    draft = _draft(target, "fused-reduced")
    tfspec.save_model(draft, tmp_path, dtype="bfloat16")
    with open(os.path.join(tmp_path, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["dtype"] == "bfloat16"
    loaded = tfspec.load_model(tmp_path)
    got, want = _weight_values(loaded), _weight_values(draft)
    rounded_somewhere = False
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key  # float32 variables, int32 vocabulary
        if value.dtype == np.float32:
            expected = tf.cast(tf.cast(value, tf.bfloat16), tf.float32).numpy()
            np.testing.assert_array_equal(got[key], expected, err_msg=key)
            rounded_somewhere |= bool(np.any(expected != value))
        else:
            np.testing.assert_array_equal(got[key], value, err_msg=key)
    assert rounded_somewhere, "bfloat16 rounding changed nothing: the test proves nothing"
    # The rounded draft decodes (and stays exact: greedy tokens are the target's).
    ar = tfspec.generate(target, PROMPTS, k=0, max_new_tokens=10, sampling=GREEDY, **EAGER)
    spec = tfspec.generate(target, PROMPTS, draft=loaded, k=2, max_new_tokens=10,
                           sampling=GREEDY, **EAGER)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)


def test_save_model_rejects_other_dtypes(target, tmp_path):
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        tfspec.save_model(_draft(target, "top"), tmp_path, dtype="float16")


def test_a_loaded_draft_keeps_its_fingerprint(target, other_target, tmp_path):
    draft = _draft(target, "top", target_fingerprint=fd.target_fingerprint(target))
    tfspec.save_model(draft, tmp_path)
    loaded = tfspec.load_model(tmp_path)
    loaded.bind(target)
    with pytest.raises(ValueError, match="trained for"):
        loaded.bind(other_target)


# -------------------------------------------------------------------------------- binding

def _assert_one_line(excinfo):
    message = str(excinfo.value)
    assert message and "\n" not in message, message


def test_a_fingerprinted_draft_refuses_another_target(target, other_target):
    fingerprint = fd.target_fingerprint(target)
    assert fingerprint == fd.target_fingerprint(T5(TARGET_CONFIG, seed=1))  # deterministic
    assert fingerprint != fd.target_fingerprint(other_target)
    draft = _draft(target, "top", target_fingerprint=fingerprint, target_name="zoo:tiny")
    assert draft.target is target
    with pytest.raises(ValueError, match="trained for zoo:tiny") as excinfo:
        draft.bind(other_target)
    _assert_one_line(excinfo)
    assert draft.target is target  # A refused bind keeps the old binding.
    with pytest.raises(ValueError, match="trained for zoo:tiny") as excinfo:
        tfspec.generate(other_target, PROMPTS, draft=draft, k=2, max_new_tokens=4, **EAGER)
    _assert_one_line(excinfo)
    # Its own target is still served, and an unfingerprinted draft binds to either.
    tfspec.generate(target, PROMPTS, draft=draft, k=2, max_new_tokens=4, **EAGER)
    free = _draft(target, "top")
    tfspec.generate(other_target, PROMPTS, draft=free, k=2, max_new_tokens=4, **EAGER)
    assert free.target is other_target


@pytest.mark.parametrize("change, match", [
    (dict(vocab_size=40), "vocab_size"),
    (dict(d_model=24, d_ff=24), "d_model"),
    (dict(num_decoder_layers=1), "decoder layers"),
])
def test_a_draft_refuses_a_target_of_other_shapes(target, change, match):
    draft = FeatureDraft(FeatureDraftConfig.for_target(target, feature_layers=(1, -1)))
    with pytest.raises(ValueError, match=match) as excinfo:
        draft.bind(T5(TARGET_CONFIG.replace(**change), seed=0))
    _assert_one_line(excinfo)
    assert draft.target is None


def test_a_draft_refuses_a_target_without_features(target):
    draft = FeatureDraft(FeatureDraftConfig.for_target(target))
    table = ref.random_table(np.random.RandomState(0), VOCAB, order=2)
    with pytest.raises(ValueError, match="needs a T5 target") as excinfo:
        draft.bind(NGram(table))
    _assert_one_line(excinfo)


def test_an_unbound_draft_says_so(target):
    draft = FeatureDraft(FeatureDraftConfig.for_target(target))
    prompt_ids, lengths = _padded(PROMPTS)
    context, cache = _prepared(_draft(target, "top"), target, prompt_ids, lengths, 8)
    ids = np.zeros((3, 1), np.int32)
    with pytest.raises(ValueError, match="not bound to a target"):
        draft.decode(context, cache, ids, ids, np.zeros((3, 1, 16), np.float32))
    with pytest.raises(ValueError, match="not bound to a target"):
        draft.alone()
    with pytest.raises(ValueError, match="prepare_with_target"):
        draft.prepare(prompt_ids, lengths, 8)


# ------------------------------------------------------------ cached decode = training path

def _rollout(draft, target, prompt_ids, lengths, decoder_ids, depth):
    _, features, context = target.decoder_features(prompt_ids, lengths, decoder_ids,
                                                    draft.feature_layers)
    return [p.numpy() for p in draft.rollout(features, decoder_ids, context.encoder_states,
                                             context.encoder_mask, depth)]


@pytest.mark.parametrize("name", ["top", "fused", "top-reduced-nocross"])
def test_target_features_from_the_cache_equal_the_uncached_ones(target, name):
    draft = _draft(target, name)
    prompt_ids, lengths = _padded(PROMPTS)
    decoder_ids = _sequence(0)
    states, features, _ = target.decoder_features(prompt_ids, lengths, decoder_ids,
                                                  draft.feature_layers)
    width = 16 * len(draft.feature_layers)
    assert features.shape == (3, 12, width)
    np.testing.assert_allclose(features.numpy()[..., -16:] if draft.feature_layers[-1] == -1
                               else features.numpy()[..., :16], states.numpy(), atol=TOL)
    context, cache = target.prepare(prompt_ids, lengths, 12)
    got = []
    for t in range(12):  # Token by token, as the loop's verify hands them over.
        logits, step_features, cache = target.decode_with_features(
            context, cache, decoder_ids[:, t:t + 1], _positions(3, t, 1), draft.feature_layers)
        got.append(step_features.numpy())
    np.testing.assert_allclose(np.concatenate(got, axis=1), features.numpy(), atol=TOL)
    # No layers: plain decode (no features).
    logits, none, _ = target.decode_with_features(context, cache, decoder_ids[:, :1],
                                                  _positions(3, 0, 1), ())
    assert none is None


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_teacher_forced_decode_equals_rollout_pass_1(target, name):
    """Step t of a decode that reads the target's true feature of t - 1 (what draft step 0
    and the catch-up read) predicts pass 1 of `rollout` at t, token by token or as one
    window; the logits are the target's LM head on that prediction."""
    draft = _draft(target, name)
    prompt_ids, lengths = _padded(PROMPTS)
    decoder_ids = _sequence(1, length=14)
    (pass_1,) = _rollout(draft, target, prompt_ids, lengths, decoder_ids, depth=1)
    inputs = _true_inputs(draft, target, prompt_ids, lengths, decoder_ids)
    context, cache = _prepared(draft, target, prompt_ids, lengths, 16)
    logits, window, _ = draft.decode(context, cache, decoder_ids, _positions(3, 0, 14), inputs)
    np.testing.assert_allclose(window.numpy(), pass_1, atol=TOL)
    steps = []
    for t in range(14):
        _, predicted, cache = draft.decode(context, cache, decoder_ids[:, t:t + 1],
                                           _positions(3, t, 1), inputs[:, t:t + 1])
        steps.append(predicted.numpy())
    np.testing.assert_allclose(np.concatenate(steps, axis=1), pass_1, atol=TOL)
    expected = draft.draft_logits_subset(
        tf.constant(pass_1), draft.lm_head_subset(target.output_projection())).numpy()
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(logits.numpy()), finite)
    np.testing.assert_allclose(logits.numpy()[finite], expected[finite], atol=1e-4)


@pytest.mark.parametrize("name", ["top", "fused-reduced", "fused-reversed-nocross"])
@pytest.mark.parametrize("depth", [2, 3])
def test_rollout_passes_equal_the_draft_steps_of_a_decode_round(target, name, depth):
    """Pass s of `rollout(depth)` at position t equals draft step s - 1 of a decode round
    that started at n = t - s + 1 with the sequence's tokens as drafts.

    The round's cache holds the true-feature entries (h_{j-1}, x_j) at every j <= n (slot
    n is written by step 0 itself), step i at n + i reads the feature that step i - 1
    predicted, and writes slot n + i before attending to it. Rows start their rounds at
    different positions (n = base + row), so one round per base checks every (t, s).
    """
    draft = _draft(target, name)
    prompt_ids, lengths = _padded(PROMPTS)
    length = 13
    decoder_ids = _sequence(2, length=length)
    passes = _rollout(draft, target, prompt_ids, lengths, decoder_ids, depth)
    for s in range(1, depth):  # The passes differ: later ones read predicted features.
        assert np.abs(passes[s][:, s:] - passes[0][:, s:]).max() > 1e-2
    inputs = _true_inputs(draft, target, prompt_ids, lengths, decoder_ids)
    context, cache = _prepared(draft, target, prompt_ids, lengths, length)
    # Every slot from the true features (what rounds and catch-ups leave at positions <= n;
    # the slots past n hold entries the round overwrites before any query reads them).
    _, _, teacher_cache = draft.decode(context, cache, decoder_ids, _positions(3, 0, length),
                                       inputs)
    rows = np.arange(3)
    checked = np.zeros([depth, length], bool)
    worst = np.zeros(depth)
    for base in range(-2, length - depth + 1):
        n = np.clip(base + rows, 0, length - depth).astype(np.int32)
        cache = teacher_cache
        features = inputs[rows, n]                                 # h_{n-1}: true
        for i in range(depth):  # Draft step i at n + i: pass i + 1.
            t = n + i
            _, predicted, cache = draft.decode(context, cache, decoder_ids[rows, t][:, None],
                                               t[:, None], features[:, None])
            features = predicted.numpy()[:, 0]
            want = passes[i][rows, t]
            worst[i] = max(worst[i], np.abs(features - want).max())
            checked[i, t] = True
    for i in range(depth):  # Every position a round of `depth` steps reaches.
        assert checked[i, i:length - depth + i + 1].all()
    assert worst.max() < TOL, f"largest difference per pass: {worst}"


def test_stale_draft_cache_slots_past_the_query_are_ignored(target):
    draft = _draft(target, "fused")
    prompt_ids, lengths = _padded(PROMPTS)
    decoder_ids = _sequence(3, length=10)
    inputs = _true_inputs(draft, target, prompt_ids, lengths, decoder_ids)
    context, cache = _prepared(draft, target, prompt_ids, lengths, 10)
    _, _, cache = draft.decode(context, cache, decoder_ids[:, :6], _positions(3, 0, 6),
                               inputs[:, :6])
    window = (decoder_ids[:, 6:9], _positions(3, 6, 3), inputs[:, 6:9])
    clean, _, _ = draft.decode(context, cache, *window)
    keys = cache.keys.numpy()
    keys[:, :, 7:] = np.random.default_rng(0).normal(0, 1e4, size=keys[:, :, 7:].shape)
    dirty, _, _ = draft.decode(context, type(cache)(tf.constant(keys), cache.values), *window)
    # Query 6 reads no slot > 6: its logits are unchanged.
    np.testing.assert_array_equal(dirty.numpy()[:, 0], clean.numpy()[:, 0])
    keys[:, :, 2] += 10.0  # A committed slot: the mask is not too wide.
    broken, _, _ = draft.decode(context, type(cache)(tf.constant(keys), cache.values), *window)
    assert np.abs(broken.numpy()[:, 0] - clean.numpy()[:, 0]).max() > 1e-3


# ----------------------------------------------------------------------- reduced vocabulary

def test_reduced_vocabulary_logits_are_minus_infinity_outside_it(target):
    reduced = _draft(target, "fused-reduced", seed=5)
    vocab = reduced.draft_vocab.numpy()
    full_config = FeatureDraftConfig.for_target(
        target, **{**DRAFTS["fused-reduced"], "draft_vocab_size": VOCAB})
    full = FeatureDraft(full_config, seed=5).bind(target)  # The same seed: the same weights.
    prompt_ids, lengths = _padded(PROMPTS)
    decoder_ids = _sequence(4)
    inputs = _true_inputs(reduced, target, prompt_ids, lengths, decoder_ids)
    outside = np.setdiff1d(np.arange(VOCAB), vocab)
    logits = {}
    for name, draft in (("reduced", reduced), ("full", full)):
        context, cache = _prepared(draft, target, prompt_ids, lengths, 12)
        logits[name], _, _ = draft.decode(context, cache, decoder_ids, _positions(3, 0, 12),
                                          inputs)
        logits[name] = logits[name].numpy()
    # decode returns the draft vocabulary's columns only (the loop lays q out over V).
    np.testing.assert_array_equal(reduced.draft_vocab_ids.numpy(), vocab)
    assert full.draft_vocab_ids is None
    assert logits["reduced"].shape == (3, 12, len(vocab))
    assert np.all(np.isfinite(logits["reduced"]))
    np.testing.assert_allclose(logits["reduced"], logits["full"][..., vocab], atol=1e-5)
    assert np.all(np.isfinite(logits["full"]))
    scattered = reduced.scatter_logits(tf.constant(logits["reduced"])).numpy()
    assert np.all(scattered[..., outside] == -np.inf)
    probs = tf.nn.softmax(scattered).numpy()
    assert np.all(probs[..., outside] == 0) and np.allclose(probs.sum(-1), 1, atol=1e-5)


@pytest.mark.parametrize("sampling", [tfspec.Sampling(temperature=1.0),
                                      tfspec.Sampling(temperature=0.7, top_p=0.9), GREEDY],
                         ids=["t1", "topp", "greedy"])
def test_drafts_never_leave_the_draft_vocabulary(target, sampling):
    k = 3
    draft = _draft(target, "fused-reduced", seed=6, cls=RecordingDraft)
    vocab = draft.draft_vocab.numpy()

    def checking_sampler(probs, uniforms):
        # The draft samples in its vocabulary: N columns, an index into `vocab`.
        assert probs.shape[1] == len(vocab) and len(vocab) < VOCAB
        return sampling_lib.sample_categorical(probs, uniforms)

    gen = testing.generate_with_rules(target, PROMPTS * 4, draft=draft, k=k,
                                      max_new_tokens=12, sampling=sampling, seed=3,
                                      eos_id=None, jit_compile=None,
                                      draft_sample_fn=checking_sampler)
    # Every draft is an input of the round's catch-up (eos_id=None: k + 1 calls a round).
    drafts = np.concatenate([call["ids"] for call in draft.log.calls[k::k + 1]])
    assert drafts.shape == (gen.stats.rounds.max() * 12, k)
    assert set(drafts.ravel().tolist()) <= set(vocab.tolist())
    if not sampling.greedy:
        # Tokens outside the draft vocabulary are still emitted (through the residual).
        assert set(gen.tokens.ravel().tolist()) - set(vocab.tolist())


def test_draft_vocabulary_picks_the_most_frequent_ids():
    counts = np.array([5, 0, 9, 9, 1, 7, 3, 9, 0, 2])
    np.testing.assert_array_equal(fd.draft_vocabulary(counts, 3), [2, 3, 7])
    np.testing.assert_array_equal(fd.draft_vocabulary(counts, 4), [2, 3, 5, 7])
    # Ties: the lower id first (2, 3 and 7 tie; 2 and 3 win).
    np.testing.assert_array_equal(fd.draft_vocabulary(counts, 2), [2, 3])
    # Always included, even if never seen; the size stays exact.
    got = fd.draft_vocabulary(counts, 4, always=[1, 8])
    np.testing.assert_array_equal(got, [1, 2, 3, 8])
    assert got.dtype == np.int32
    # An always-id that is frequent anyway takes no extra slot.
    np.testing.assert_array_equal(fd.draft_vocabulary(counts, 3, always=[3]), [2, 3, 7])
    np.testing.assert_array_equal(fd.draft_vocabulary(counts, 10), np.arange(10))
    rng = np.random.default_rng(0)
    for size in (1, 5, 17, 40):
        counts = rng.integers(0, 20, size=40)
        got = fd.draft_vocabulary(counts, size, always=[1])
        assert len(got) == len(set(got.tolist())) == size and 1 in got
        assert np.all(np.diff(got) > 0)
        # No id left out is more frequent than a chosen one (other than the always-id).
        chosen = [i for i in got if i != 1]
        left = np.setdiff1d(np.arange(40), got)
        if len(left) and chosen:
            assert counts[left].max() <= counts[chosen].min()


# ---------------------------------------------------------------------- greedy identity

@pytest.fixture(scope="module")
def autoregressive(target):
    """{(batch, jit_compile): greedy autoregressive Generation}."""
    cache = {}

    def get(batch, jit_compile):
        if (batch, jit_compile) not in cache:
            cache[batch, jit_compile] = tfspec.generate(
                target, PROMPTS[:batch], k=0, max_new_tokens=14, sampling=GREEDY,
                jit_compile=jit_compile)
        return cache[batch, jit_compile]

    return get


EARLY_STOP = tfspec.AutoDraft(k_max=3, confidence=0.3, initial_k=2, fallback=False)
KS = {"k1": 1, "k2": 2, "k3": 3, "auto": "auto", "auto-early": EARLY_STOP}
# (draft, k, batch, jit_compile): every draft shape and every k in eager mode (~2 s each),
# every k at batch 1 too; the XLA loop (5-15 s to compile each) for every shape and every
# k once. The trained draft below adds long accepted runs (random drafts rarely match).
_EAGER = ([(name, k, 3, None) for name in ("top", "fused", "top-reduced-nocross",
                                           "fused-reduced") for k in KS]
          + [("fused-reduced", k, 1, None) for k in KS])
_XLA = [("top", "k1", 1, True), ("fused", "k3", 3, True), ("fused-reduced", "k2", 3, True),
        ("top-reduced-nocross", "auto-early", 3, True), ("fused-reversed-nocross", "auto", 1,
                                                          True)]


@pytest.mark.parametrize("name, k_name, batch, jit_compile", _EAGER + _XLA,
                         ids=[f"{n}-{k}-batch{b}-{'xla' if j else 'eager'}"
                              for n, k, b, j in _EAGER + _XLA])
def test_greedy_speculative_equals_greedy_autoregressive(target, autoregressive, name, k_name,
                                                         batch, jit_compile):
    adaptive.reset()
    draft = _draft(target, name)
    spec = tfspec.generate(target, PROMPTS[:batch], draft=draft, k=KS[k_name],
                           max_new_tokens=14, sampling=GREEDY, jit_compile=jit_compile)
    ar = autoregressive(batch, jit_compile)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    if not isinstance(KS[k_name], int):
        assert spec.mode == adaptive.SPECULATIVE
    assert spec.stats.drafted.sum() > 0


def test_greedy_identity_with_a_tied_target():
    """A v1.0 target (rescaled LM head, which the draft's q shares)."""
    tied = T5(TIED_CONFIG, seed=3)
    draft = FeatureDraft(FeatureDraftConfig.for_target(tied, feature_layers=(0, -1)),
                         seed=4)
    assert draft.config.rescales_states
    ar = tfspec.generate(tied, PROMPTS, k=0, max_new_tokens=12, sampling=GREEDY, **EAGER)
    for jit_compile in (True, None):
        spec = tfspec.generate(tied, PROMPTS, draft=draft, k=2, max_new_tokens=12,
                               sampling=GREEDY, jit_compile=jit_compile)
        np.testing.assert_array_equal(spec.tokens, ar.tokens)


# --------------------------------------------------------------------- feature hand-off

def _check_hand_off(target, draft, prompts, k, sampling, max_new_tokens=12):
    """Runs the loop eagerly and checks, round by round, every feature the draft received
    and the draft cache it was left with. Returns the accepted counts of all rounds."""
    draft.log.calls.clear()
    gen = tfspec.generate(target, prompts, draft=draft, k=k, max_new_tokens=max_new_tokens,
                          sampling=sampling, seed=7, eos_id=None, jit_compile=None)
    calls = list(draft.log.calls)
    batch = len(prompts)
    assert (gen.lengths == max_new_tokens).all()
    # Without EOS every round makes k draft steps and one k-wide catch-up.
    assert len(calls) % (k + 1) == 0
    rounds = len(calls) // (k + 1)
    assert rounds == gen.stats.rounds.max()
    prompt_ids, lengths = _padded(prompts)
    decoder_ids = np.concatenate([np.zeros((batch, 1), np.int32), gen.tokens], axis=1)
    inputs = _true_inputs(draft, target, prompt_ids, lengths, decoder_ids)   # [B, L, D]
    # What a draft run over the committed sequence with the true features holds.
    max_length = calls[0]["keys"].shape[2]
    context, cache = _prepared(draft, target, prompt_ids, lengths, max_length)
    reference = draft.decode(context, cache, decoder_ids, _positions(batch, 0,
                                                                      max_new_tokens + 1),
                             inputs)[2]
    draft.log.calls.clear()
    reference_keys, reference_values = reference.keys.numpy(), reference.values.numpy()
    accepted, live_rounds = [], 0
    for r in range(rounds):
        steps, catch_up = calls[r * (k + 1): r * (k + 1) + k], calls[r * (k + 1) + k]
        n = steps[0]["positions"][:, 0]
        after = (calls[(r + 1) * (k + 1)]["positions"][:, 0] if r + 1 < rounds
                 else gen.lengths)
        for b in range(batch):
            if n[b] >= max_new_tokens:  # A finished row (its rounds change nothing).
                assert after[b] == n[b]
                continue
            live_rounds += 1
            accepted.append(after[b] - n[b] - 1)
            # Step 0 reads out[n] and the target's true feature of n - 1 (zeros at n = 0).
            assert steps[0]["ids"][b, 0] == decoder_ids[b, n[b]]
            np.testing.assert_allclose(steps[0]["features"][b, 0], inputs[b, n[b]],
                                       atol=TOL, err_msg=f"round {r} row {b} step 0")
            if n[b] == 0:
                assert not steps[0]["features"][b, 0].any()
            # Step i reads the feature step i - 1 predicted, at position n + i.
            for i in range(1, k):
                assert steps[i]["positions"][b, 0] == n[b] + i
                np.testing.assert_array_equal(steps[i]["features"][b, 0],
                                              steps[i - 1]["predicted"][b, 0])
            # The catch-up rewrites n + 1 .. n + k from the drafts and the verified
            # features of n .. n + k - 1; the committed ones are the true features.
            np.testing.assert_array_equal(catch_up["positions"][b], n[b] + 1 + np.arange(k))
            committed = min(after[b] - n[b], k)
            np.testing.assert_allclose(catch_up["features"][b, :committed],
                                       inputs[b, n[b] + 1:n[b] + 1 + committed], atol=TOL,
                                       err_msg=f"round {r} row {b} catch-up")
            a = after[b] - n[b] - 1
            np.testing.assert_array_equal(catch_up["ids"][b, :a],
                                          decoder_ids[b, n[b] + 1:n[b] + 1 + a])
            # After the round, every committed slot j < n' holds (h_{j-1}, out[j]).
            for name, got, want in (("keys", catch_up["keys"], reference_keys),
                                    ("values", catch_up["values"], reference_values)):
                np.testing.assert_allclose(got[b, :, :after[b]], want[b, :, :after[b]],
                                           atol=TOL, err_msg=f"round {r} row {b} {name}")
    assert live_rounds == gen.stats.rounds.sum()
    # (The statistics also count drafts accepted past max_new_tokens in the last round.)
    assert sum(accepted) <= gen.stats.accepted.sum()
    return np.array(accepted)


@pytest.mark.parametrize("name", ["top", "fused-reduced"])
@pytest.mark.parametrize("k", [1, 3])
def test_feature_hand_off_and_draft_cache_after_every_round(target, name, k):
    """Sampled rows (temperature 1: rounds accept anything from 0 to k drafts) at
    different positions of one batch."""
    draft = _draft(target, name, cls=RecordingDraft)
    accepted = _check_hand_off(target, draft, PROMPTS * 2, k, tfspec.Sampling(temperature=1.0))
    assert (accepted == 0).any() and (accepted > 0).any(), accepted
    if k == 3:
        assert (accepted == k).any() or (accepted == 2).any(), accepted


# ------------------------------------------------------------- a trained draft end to end

TRAIN_ROWS, TRAIN_LENGTH = 64, 12


def _target_sample_batch(target, prompts, seed):
    """A training batch of the target's own continuations (temperature 1) of `prompts`."""
    gen = tfspec.generate(target, prompts, k=0, max_new_tokens=TRAIN_LENGTH,
                          sampling=tfspec.Sampling(temperature=1.0), seed=seed, eos_id=None,
                          **EAGER)
    examples = [examples_lib.Example(f"x:{i}", "completion", np.asarray(p, np.int32), row)
                for i, (p, row) in enumerate(zip(prompts, gen.tokens))]
    width = max(len(p) for p in prompts)
    batch = examples_lib.pad_batch(examples, len(prompts), width, TRAIN_LENGTH)
    return {key: tf.constant(value) for key, value in batch._asdict().items()}


@pytest.fixture(scope="module")
def trained(target):
    """(draft, fresh draft, prompts, held-out batch): a draft trained 300 Adam steps
    (depth 2) on the target's samples; ~15 s."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(2, VOCAB, size=int(rng.integers(2, 7))).tolist()
               for _ in range(TRAIN_ROWS)]
    batch = _target_sample_batch(target, prompts, seed=0)
    held_out = _target_sample_batch(target, prompts, seed=5)
    draft = _draft(target, "fused")
    fresh = _draft(target, "fused")
    objective = FeatureDraftObjective(target, depth=2)
    optimizer = tf.keras.optimizers.Adam(1e-2)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss, _ = objective(draft, batch)
        grads = tape.gradient(loss, draft.trainable_variables)
        optimizer.apply_gradients(zip(grads, draft.trainable_variables))
        return loss

    for _ in range(300):
        step()
    return draft, fresh, prompts, held_out


def test_a_trained_draft_accepts_what_its_training_metric_predicts(target, trained):
    """With k = 1 every round verifies one draft step 0, i.e. pass 1 of training: the mean
    acceptance probability beta of the decode equals the held-out `overlap_1` of the
    objective (both on the target's own samples): decoding sees what training saw.

    A sanity check, not a sharp one: a trained draft tolerates a feature one position
    old fairly well (carrying h_{n'-2} instead of h_{n'-1} costs ~0.03 of beta here), so
    the position of the hand-off is pinned down by the recorded hand-off tests."""
    draft, fresh, prompts, held_out = trained
    objective = FeatureDraftObjective(target, depth=2)
    _, metrics = objective(draft, held_out)
    _, fresh_metrics = objective(fresh, held_out)
    overlaps = [float(metrics["overlap_1"]), float(metrics["overlap_2"])]
    assert overlaps[0] > 0.5 and float(fresh_metrics["overlap_1"]) < 0.2, (
        overlaps, float(fresh_metrics["overlap_1"]))
    sampling = tfspec.Sampling(temperature=1.0)
    gen = tfspec.generate(target, prompts, draft=draft, k=1, max_new_tokens=TRAIN_LENGTH,
                          sampling=sampling, seed=9, eos_id=None, **EAGER)
    assert abs(gen.stats.beta_mean - overlaps[0]) < 0.05, (gen.stats.beta_mean, overlaps)
    # k = 3: later steps read predicted features (passes 2, 3); beta stays in range.
    gen = tfspec.generate(target, prompts, draft=draft, k=3, max_new_tokens=TRAIN_LENGTH,
                          sampling=sampling, seed=9, eos_id=None, **EAGER)
    assert min(overlaps) - 0.1 < gen.stats.beta_mean < max(overlaps) + 0.1, (
        gen.stats.beta_mean, overlaps)
    ar = tfspec.generate(target, prompts[:16], k=0, max_new_tokens=TRAIN_LENGTH,
                         sampling=GREEDY, eos_id=None, **EAGER)
    spec = tfspec.generate(target, prompts[:16], draft=draft, k=3,
                           max_new_tokens=TRAIN_LENGTH, sampling=GREEDY, eos_id=None,
                           **EAGER)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    assert spec.stats.acceptance_rate > 0.35, spec.stats.acceptance_rate


def test_a_trained_draft_hands_off_features_right(target, trained):
    """The recorded hand-off with a draft that accepts often (greedy: long accepted runs)."""
    draft, _, prompts, _ = trained
    recording = RecordingDraft(draft.config, initialize="zeros").bind(target)
    for variable, source in zip(recording.weights, draft.weights, strict=True):
        variable.assign(source)
    accepted = _check_hand_off(target, recording, prompts[:4], 3, GREEDY)
    assert (accepted == 3).any(), accepted


# ------------------------------------------------------------------------- draft alone

def test_the_draft_alone_decodes_autoregressively_on_its_own_features(target):
    draft = _draft(target, "fused-reduced")
    alone = draft.alone()
    assert draft.alone() is alone
    assert (alone.vocab_size, alone.eos_id, alone.pad_id) == (VOCAB, 1, 0)
    gen = tfspec.generate(alone, PROMPTS, k=0, max_new_tokens=8, sampling=GREEDY, eos_id=None)
    eager = tfspec.generate(alone, PROMPTS, k=0, max_new_tokens=8, sampling=GREEDY,
                            eos_id=None, jit_compile=None)
    np.testing.assert_array_equal(gen.tokens, eager.tokens)
    assert set(gen.tokens.ravel().tolist()) <= set(draft.draft_vocab.numpy().tolist())
    # By hand: step t reads the feature step t - 1 predicted (zeros at t = 0).
    prompt_ids, lengths = _padded(PROMPTS)
    context, cache = _prepared(draft, target, prompt_ids, lengths, 9)
    ids, features, tokens = np.zeros((3, 1), np.int32), np.zeros((3, 1, 16), np.float32), []
    for t in range(8):
        logits, predicted, cache = draft.decode(context, cache, ids, _positions(3, t, 1),
                                                features)
        ids = draft.draft_vocab.numpy()[logits.numpy()[:, 0].argmax(-1)]
        ids = ids.astype(np.int32)[:, None]
        features = predicted.numpy()
        tokens.append(ids)
    np.testing.assert_array_equal(gen.tokens, np.concatenate(tokens, axis=1))
    sampled = tfspec.generate(alone, PROMPTS, k=0, max_new_tokens=8,
                              sampling=tfspec.Sampling(temperature=1.0), seed=2, **EAGER)
    assert (sampled.lengths >= 1).all()
    context, (cache, _) = alone.prepare(prompt_ids, lengths, 4)
    with pytest.raises(ValueError, match="one token at a time"):
        alone.decode(context, (cache, tf.zeros([3, 16])), np.zeros((3, 2), np.int32),
                     _positions(3, 0, 2))
