"""Tests of tfspec.models.medusa: `MedusaHeads` for a T5 target, and its training loss.

Beyond the config, the checkpoint layout and the binding:

- The feature hand-off of the loop: every round's `propose` receives h_{n-1}, the target's
  uncached final decoder state at the row's last committed position n - 1, and out[n]
  (recorded in eager mode). A hand-off off by one position stays exact (any q is allowed),
  so only acceptance would show it; this test shows it directly.
- Greedy identity through `tfspec.generate` for several head shapes, k, batch layouts and
  execution modes.
- The loss (`tfspec.training.medusa`): head i at position t is scored against the target's
  distribution at t + i, gradients reach every head variable and no target variable.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import adaptive
from tfspec.models import T5, T5Config
from tfspec.models.medusa import MedusaConfig, MedusaHeads
from tfspec.training import examples as examples_lib
from tfspec.training import medusa as medusa_training

VOCAB = 32
TARGET_CONFIG = T5Config(vocab_size=VOCAB, d_model=16, d_kv=4, d_ff=24, num_layers=1,
                         num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8,
                         relative_attention_max_distance=16, feed_forward_proj="gated-gelu",
                         tie_word_embeddings=False)
TIED_CONFIG = TARGET_CONFIG.replace(feed_forward_proj="relu", tie_word_embeddings=True)
REDUCED = 20
HEADS = {
    "token": dict(heads=3, d_ff=24),
    "token-reduced": dict(heads=4, d_ff=8, draft_vocab_size=REDUCED),
    "no-token": dict(heads=3, d_ff=24, reads_token=False),
}
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
GREEDY = tfspec.Sampling(temperature=0.0)
EAGER = dict(jit_compile=None)


@pytest.fixture(scope="module")
def target():
    return T5(TARGET_CONFIG, seed=1)


def _reduced_vocabulary(seed, size=REDUCED):
    rng = np.random.default_rng(seed)
    rest = rng.choice(np.delete(np.arange(VOCAB), 1), size=size - 1, replace=False)
    return np.sort(np.append(rest, 1)).astype(np.int32)


def randomize(heads, seed):
    """Gives a fresh model's zero-initialised output weights random values (a fresh head
    is the identity before the LM head: all heads would propose the same token)."""
    rng = np.random.default_rng(seed)
    for w in heads.head_out:
        w.assign(rng.standard_normal(w.shape).astype(np.float32) * 0.5)
    return heads


def _heads(target, name, seed=2, **overrides):
    config = MedusaConfig.for_target(target, **{**HEADS[name], **overrides})
    heads = randomize(MedusaHeads(config, seed=seed), seed).bind(target)
    if not heads.full_vocabulary:
        heads.draft_vocab.assign(_reduced_vocabulary(seed, config.draft_vocab_size))
    return heads


# ---------------------------------------------------------------------- config, weights

@pytest.mark.parametrize("overrides, match", [
    (dict(heads=0), "heads must be >= 1"),
    (dict(d_ff=0), "d_ff must be >= 1"),
    (dict(draft_vocab_size=VOCAB + 1), "draft_vocab_size must be in"),
])
def test_config_rejects_bad_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        MedusaConfig(vocab_size=VOCAB, d_model=16, **overrides)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_config_round_trips_and_takes_the_targets_shapes(target, name):
    config = MedusaConfig.for_target(target, **HEADS[name])
    assert MedusaConfig.from_dict(config.to_dict()) == config
    assert (config.vocab_size, config.d_model, config.feature_layers) == (VOCAB, 16, (-1,))
    assert config.to_dict()["architectures"] == ["T5MedusaHeads"]
    with pytest.raises(ValueError, match="unknown Medusa config keys: bogus"):
        MedusaConfig.from_dict({**config.to_dict(), "bogus": 1})


@pytest.mark.parametrize("name", sorted(HEADS))
def test_weights_are_the_heads_own(target, name):
    heads = _heads(target, name)
    c = heads.config
    own = {v.path for v in heads.weights}
    assert not own & {v.path for v in target.weights}
    mapping = heads.weight_map()
    assert len(mapping) == len(heads.weights)
    expected = c.heads * (2 * c.d_model * c.d_ff + c.d_model) + (
        2 * c.d_model * c.d_model + 2 * c.d_model if c.reads_token else 0)
    assert sum(int(np.prod(v.shape)) for v in heads.trainable_weights) == expected


@pytest.mark.parametrize("name", ["token", "token-reduced"])
def test_save_load_round_trip_is_exact_in_float32(target, name, tmp_path):
    heads = _heads(target, name)
    tfspec.save_model(heads, tmp_path / "m", dtype="float32")
    loaded = tfspec.load_model(str(tmp_path / "m"))
    assert isinstance(loaded, MedusaHeads) and loaded.target is None
    assert loaded.config == heads.config
    for (name_a, (a, _)), (name_b, (b, _)) in zip(heads.weight_map().items(),
                                                    loaded.weight_map().items()):
        assert name_a == name_b
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_fingerprinted_draft_refuses_another_target(target):
    from tfspec.models.target_binding import target_fingerprint
    config = MedusaConfig.for_target(target, heads=2, target_fingerprint=target_fingerprint(
        target), target_name="zoo:some-target")
    heads = MedusaHeads(config)
    other = T5(TARGET_CONFIG, seed=9)
    with pytest.raises(ValueError, match=r"^this Medusa draft was trained for "
                                         r"zoo:some-target \(fingerprint [0-9a-f]{16}\); "):
        tfspec.generate(other, PROMPTS, draft=heads, k=2, max_new_tokens=3, **EAGER)
    heads.bind(target)  # Its own target binds.


def test_k_beyond_the_heads_is_a_one_line_error(target):
    heads = _heads(target, "token")
    with pytest.raises(ValueError, match=r"^this Medusa draft has 3 heads, so it drafts at "
                                         r"most k = 3 tokens per round; got k = 4$"):
        tfspec.generate(target, PROMPTS, draft=heads, k=4, max_new_tokens=3, **EAGER)


def test_heads_neither_prepare_nor_decode_alone(target):
    heads = _heads(target, "token")
    with pytest.raises(ValueError, match="prepare_with_target"):
        heads.prepare(None, None, 4)
    with pytest.raises(ValueError, match="propose"):
        heads.decode(None, None, None, None)
    with pytest.raises(ValueError, match="not bound to a target"):
        MedusaHeads(heads.config).alone()


# ------------------------------------------------------------------------ propose

def test_propose_is_the_uncached_heads_on_the_last_state(target):
    """propose(h, token) = LM head of each head's state; -inf exactly outside the draft
    vocabulary; head i differs from head j."""
    heads = _heads(target, "token-reduced")
    ids, lengths = np.array([[5, 6, 7], [9, 10, 0]], np.int32), np.array([3, 2], np.int32)
    context, _ = target.prepare(ids, lengths, 8)
    draft_context, cache = heads.prepare_with_target(target, context, ids, lengths, 8)
    assert cache.shape == (2, 0)
    features = tf.random.stateless_normal([2, 16], seed=[1, 2])
    last = tf.constant([3, 4])
    logits = heads.propose(draft_context, last, features, 3).numpy()
    assert logits.shape == (2, 3, VOCAB)
    outside = np.setdiff1d(np.arange(VOCAB), heads.draft_vocab.numpy())
    assert np.all(np.isneginf(logits[:, :, outside]))
    inside = logits[:, :, heads.draft_vocab.numpy()]
    assert np.all(np.isfinite(inside))
    states = heads.head_states(features[:, None], last[:, None], 3)[:, 0]
    manual = np.einsum("bkd,dn->bkn", states,
                       np.asarray(target.output_projection())[:, heads.draft_vocab.numpy()])
    np.testing.assert_allclose(inside, manual, rtol=1e-5, atol=1e-5)
    assert np.abs(inside[:, 0] - inside[:, 1]).max() > 1e-2


class _Recording(MedusaHeads):
    """Medusa heads that record, in eager mode, what every `propose` receives and gives."""

    def propose(self, context, last_ids, features, k):
        logits = super().propose(context, last_ids, features, k)
        self.calls.append((np.asarray(last_ids), np.asarray(features), np.asarray(logits)))
        return logits


@pytest.mark.parametrize("k", [1, 3])
def test_every_round_proposes_from_the_state_of_the_last_committed_position(target, k):
    """Greedy, so each round's acceptance can be replayed from its drafts (the heads'
    argmaxes) and the committed tokens: a = leading drafts equal to the committed tokens,
    n' = n + a + 1. Draft = a copy of the target's own head makes head 0 always right."""
    heads = randomize(_Recording(MedusaConfig.for_target(target, heads=3, d_ff=24), seed=3),
                      3)
    heads.calls = []
    max_new = 10
    gen = tfspec.generate(target, PROMPTS, draft=heads, k=k, max_new_tokens=max_new,
                          sampling=GREEDY, eos_id=None, jit_compile=None)
    ids, lengths = np.zeros((3, 4), np.int32), np.array([len(p) for p in PROMPTS], np.int32)
    for row, prompt in enumerate(PROMPTS):
        ids[row, :len(prompt)] = prompt
    decoder_ids = np.concatenate([np.zeros((3, 1), np.int32), gen.tokens], axis=1)
    states = np.asarray(target.decoder_features(ids, lengths, decoder_ids)[0])
    n = np.zeros(3, np.int32)  # Committed lengths, replayed round by round.
    assert len(heads.calls) == gen.stats.rounds.max()
    for last_ids, features, logits in heads.calls:
        for row in range(3):
            if n[row] >= max_new:
                continue
            assert last_ids[row] == (0 if n[row] == 0 else gen.tokens[row, n[row] - 1])
            expected = np.zeros(16) if n[row] == 0 else states[row, n[row] - 1]
            np.testing.assert_allclose(features[row], expected, rtol=1e-4, atol=1e-4)
            drafts = logits[row].argmax(-1)
            a = 0
            while (a < k and n[row] + a < max_new
                   and drafts[a] == gen.tokens[row, n[row] + a]):
                a += 1
            n[row] = min(n[row] + a + 1, max_new)
    assert (n == max_new).all()


# ---------------------------------------------------------------------- greedy identity

@pytest.fixture(scope="module")
def autoregressive(target):
    cache = {}

    def get(batch, jit_compile):
        if (batch, jit_compile) not in cache:
            cache[batch, jit_compile] = tfspec.generate(
                target, PROMPTS[:batch], k=0, max_new_tokens=14, sampling=GREEDY,
                jit_compile=jit_compile)
        return cache[batch, jit_compile]

    return get


EARLY_STOP = tfspec.AutoDraft(k_max=3, confidence=0.3, initial_k=2, fallback=False)
KS = {"k1": 1, "k3": 3, "auto": tfspec.AutoDraft(k_max=3, fallback=False),
      "auto-early": EARLY_STOP}
_EAGER = [(name, k, 3, None) for name in sorted(HEADS) for k in KS] + [
    ("token-reduced", "k3", 1, None)]
_XLA = [("token", "k3", 3, True), ("token-reduced", "k1", 1, True),
        ("no-token", "auto-early", 3, True)]


@pytest.mark.parametrize("name, k_name, batch, jit_compile", _EAGER + _XLA,
                         ids=[f"{n}-{k}-batch{b}-{'xla' if j else 'eager'}"
                              for n, k, b, j in _EAGER + _XLA])
def test_greedy_speculative_equals_greedy_autoregressive(target, autoregressive, name, k_name,
                                                         batch, jit_compile):
    adaptive.reset()
    heads = _heads(target, name)
    spec = tfspec.generate(target, PROMPTS[:batch], draft=heads, k=KS[k_name],
                           max_new_tokens=14, sampling=GREEDY, jit_compile=jit_compile)
    ar = autoregressive(batch, jit_compile)
    np.testing.assert_array_equal(spec.tokens, ar.tokens)
    np.testing.assert_array_equal(spec.lengths, ar.lengths)
    assert spec.stats.drafted.sum() > 0


def test_greedy_identity_with_a_tied_target():
    tied = T5(TIED_CONFIG, seed=3)
    heads = randomize(MedusaHeads(MedusaConfig.for_target(tied, heads=2, d_ff=8), seed=4), 4)
    assert heads.config.rescales_states
    ar = tfspec.generate(tied, PROMPTS, k=0, max_new_tokens=12, sampling=GREEDY, **EAGER)
    for jit_compile in (True, None):
        spec = tfspec.generate(tied, PROMPTS, draft=heads, k=2, max_new_tokens=12,
                               sampling=GREEDY, jit_compile=jit_compile)
        np.testing.assert_array_equal(spec.tokens, ar.tokens)


@pytest.mark.parametrize("sampling", [tfspec.Sampling(temperature=1.0),
                                      tfspec.Sampling(temperature=0.7, top_p=0.9)],
                         ids=["t1", "t0.7-topp0.9"])
def test_sampled_drafts_never_leave_the_draft_vocabulary(target, sampling):
    """Stats count only real drafts, and the sampled run decodes every row to the end."""
    heads = _heads(target, "token-reduced")
    gen = tfspec.generate(target, PROMPTS * 4, draft=heads, k=4, max_new_tokens=12,
                          sampling=sampling, eos_id=None, **EAGER)
    assert (gen.lengths == 12).all()
    assert gen.stats.drafted.sum() == 4 * gen.stats.rounds.sum()
    assert 0 <= gen.stats.acceptance_rate < 1


def test_the_heads_alone_decode_one_head_per_token(target):
    heads = _heads(target, "token")
    alone = heads.alone()
    assert alone is heads.alone()
    gen = tfspec.generate(alone, PROMPTS, k=0, max_new_tokens=6, sampling=GREEDY, **EAGER)
    assert gen.tokens.shape == (3, 6)


# -------------------------------------------------------------------------- training

@pytest.fixture(scope="module")
def batch():
    from tests.tfspec.training.tiny_data import random_examples
    examples = random_examples(4, vocab_size=VOCAB, seed=3)
    padded = examples_lib.pad_batch(examples, 4, 12, 8)
    return {key: tf.constant(value) for key, value in padded._asdict().items()}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_loss_is_finite_with_every_metric(target, batch, name):
    heads = _heads(target, name)
    loss, metrics = medusa_training.MedusaObjective(target)(heads, batch)
    assert np.isfinite(float(loss)) and float(loss) > 0
    expected = {"target_ce"} | {f"{m}_{i}" for i in range(1, heads.heads + 1)
                                for m in ("ce", "overlap", "greedy_match")}
    assert set(metrics) == expected
    for i in range(1, heads.heads + 1):
        assert 0.0 <= float(metrics[f"overlap_{i}"]) <= 1.0


def test_head_i_is_scored_against_the_target_distribution_i_positions_ahead(target, batch):
    """ce_i equals a hand computation: at position t, head i's q against the target's
    softmax at t + i, over the positions whose t + i is a real target token."""
    heads = _heads(target, "token")
    _, metrics = medusa_training.MedusaObjective(target)(heads, batch)
    states = np.asarray(target.decoder_features(batch["encoder_ids"], batch["encoder_lengths"],
                                                batch["decoder_input_ids"])[0])
    p = tf.nn.softmax(target.logits_from_states(states)).numpy()
    inputs = np.concatenate([np.zeros_like(states[:, :1]), states[:, :-1]], axis=1)
    head_states = heads.head_states(inputs, batch["decoder_input_ids"], heads.heads)
    lm_head = target.output_projection()
    mask = batch["loss_mask"].numpy()
    length = mask.shape[1]
    for i in range(heads.heads):
        log_q = tf.nn.log_softmax(heads.logits_subset(head_states[:, :, i], lm_head)).numpy()
        terms = [-(p[b, t + i] * log_q[b, t]).sum() for b in range(mask.shape[0])
                 for t in range(length - i) if mask[b, t + i]]
        np.testing.assert_allclose(float(metrics[f"ce_{i + 1}"]), np.mean(terms), rtol=1e-4)


def test_gradients_reach_every_head_variable_and_no_target_variable(target, batch):
    heads = _heads(target, "token-reduced")
    objective = medusa_training.MedusaObjective(target)
    with tf.GradientTape() as tape:
        loss, _ = objective(heads, batch)
    variables = heads.trainable_variables + target.trainable_variables
    grads = tape.gradient(loss, variables)
    own = len(heads.trainable_variables)
    for v, g in zip(variables[:own], grads[:own]):
        assert g is not None and float(tf.reduce_max(tf.abs(g))) > 0, v.path
    assert all(g is None for g in grads[own:])


def test_a_few_adam_steps_reduce_the_loss_on_a_fixed_batch(target, batch):
    heads = _heads(target, "token")
    objective = medusa_training.MedusaObjective(target)
    optimizer = tf.keras.optimizers.Adam(1e-2)
    first = None
    for _ in range(15):
        with tf.GradientTape() as tape:
            loss, _ = objective(heads, batch)
        if first is None:
            first = float(loss)
        grads = tape.gradient(loss, heads.trainable_variables)
        optimizer.apply_gradients(zip(grads, heads.trainable_variables))
    assert float(loss) < 0.9 * first


def test_the_training_step_builds_no_per_position_weight_products(target, batch):
    """The gradient of each head's products is one [K, N] matrix product: no tensor of the
    traced step holds a [K, N] outer product per position (what TensorFlow's einsum
    gradient over an ellipsis builds, 6 GB per batch at the embedded target's shapes)."""
    heads = _heads(target, "token")
    objective = medusa_training.MedusaObjective(target)

    @tf.function
    def gradients(batch):
        with tf.GradientTape() as tape:
            loss, _ = objective(heads, batch)
        return tape.gradient(loss, heads.trainable_variables)

    graph = gradients.get_concrete_function(batch).graph
    sizes = [shape.num_elements() for op in graph.get_operations() for shape in
             (t.shape for t in op.outputs) if shape.is_fully_defined()]
    rows = int(np.prod(batch["decoder_input_ids"].shape))
    # The widest legitimate tensor is a row of logits (or the concatenated input) per position.
    widest = rows * max(VOCAB, 2 * TARGET_CONFIG.d_model, HEADS["token"]["d_ff"])
    assert max(sizes) <= heads.heads * widest, max(sizes)
    # Any [B, T, K, N] product would be at least rows * d_model * d_ff elements.
    assert max(sizes) < rows * TARGET_CONFIG.d_model * HEADS["token"]["d_ff"]
