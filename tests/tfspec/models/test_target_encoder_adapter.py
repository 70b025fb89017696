"""A T5 draft that reads its target's encoder output (`T5.attach_target_encoder`).

The distribution tests of such a draft are in `tests/tfspec/test_t5_exactness.py`; these
check what it computes, that its own encoder never runs in `tfspec.generate`, and what it
refuses.
"""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec.models import T5, T5Config
from tfspec.models import target_binding

_COMMON = dict(vocab_size=40, d_kv=8, num_heads=2, feed_forward_proj="gated-gelu",
               tie_word_embeddings=False)
TARGET = T5Config(d_model=24, d_ff=40, num_layers=2, num_decoder_layers=2, **_COMMON)
DRAFT = T5Config(d_model=16, d_ff=24, num_layers=1, num_decoder_layers=1, **_COMMON)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]


def _projection(seed=0, rows=24, columns=16):
    return np.random.default_rng(seed).normal(0.0, rows ** -0.5, [rows, columns])


def _pair(target_seed=1, draft_seed=2):
    target, draft = T5(TARGET, seed=target_seed), T5(DRAFT, seed=draft_seed)
    return target, draft.attach_target_encoder(_projection(), target_binding.target_fingerprint(
        target), "the test target")


def test_its_context_is_the_projected_target_encoder_output():
    """`prepare_with_target` decodes what `prepare` would if the draft's encoder had
    returned the target's encoder output times the projection."""
    target, draft = _pair()
    ids = tf.constant([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]], tf.int32)
    lengths = tf.constant([4, 6], tf.int32)
    target_context, _ = target.prepare(ids, lengths, 8)
    context, cache = draft.prepare_with_target(target, target_context, ids, lengths, 8)
    states, mask = target.encode(ids, lengths)
    projected = tf.einsum("bsd,de->bse", states, draft.target_encoder_projection)
    draft.encode = lambda *args, **kwargs: (projected, mask)  # the instance, this test only
    want_context, want_cache = draft.prepare(ids, lengths, 8)
    window = tf.constant([[0, 3, 4], [0, 7, 8]], tf.int32)
    positions = tf.constant([[0, 1, 2], [0, 1, 2]], tf.int32)
    got, _ = draft.decode(context, cache, window, positions)
    want, _ = draft.decode(want_context, want_cache, window, positions)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    # The projection matters: another one gives other logits.
    draft.attach_target_encoder(_projection(seed=5))
    other, _ = draft.decode(*draft.prepare_with_target(target, target_context, ids, lengths, 8),
                            window, positions)
    assert np.abs(other.numpy() - want.numpy()).max() > 1e-3


@pytest.mark.parametrize("k", [1, 3])
def test_generate_never_runs_the_draft_encoder_and_greedy_is_the_target(k, monkeypatch):
    target, draft = _pair()
    greedy = tfspec.Sampling(temperature=0.0)
    want = tfspec.generate(target, PROMPTS, k=0, max_new_tokens=12, sampling=greedy,
                           eos_id=None)

    def no_encoder(*args, **kwargs):
        raise AssertionError("the draft's own encoder ran")

    monkeypatch.setattr(draft, "encode", no_encoder)
    got = tfspec.generate(target, PROMPTS, draft=draft, k=k, max_new_tokens=12,
                          sampling=greedy, eos_id=None)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    assert got.stats.acceptance_rate > 0  # drafts were made, and some accepted


def test_it_refuses_a_target_it_was_not_fitted_to():
    _, draft = _pair()
    with pytest.raises(ValueError, match="fitted to the test target") as error:
        tfspec.generate(T5(TARGET, seed=9), PROMPTS, draft=draft, k=2, max_new_tokens=4)
    assert "\n" not in str(error.value)
    wide = T5(TARGET.replace(d_model=32), seed=1)
    with pytest.raises(ValueError, match="d_model 24 .* has 32"):
        draft.bind(wide)
    # Detached, it runs its own encoder and drafts for any target of its vocabulary.
    draft.detach_target_encoder()
    assert not draft.reads_target_encoder
    tfspec.generate(wide, PROMPTS, draft=draft, k=2, max_new_tokens=4)


@pytest.mark.parametrize("shape", [[24], [24, 8], [24, 16, 1]])
def test_a_projection_of_the_wrong_shape_is_refused(shape):
    with pytest.raises(ValueError, match=r"\[target d_model, 16\]"):
        T5(DRAFT).attach_target_encoder(np.zeros(shape))


def test_the_projection_is_not_a_checkpoint_weight():
    """Keras does not track it: it is not among the HF tensors save_model writes."""
    _, draft = _pair()
    count = len(T5(DRAFT, seed=2).weights)
    assert len(draft.weights) == count
    assert draft.target_encoder_projection.shape == (24, 16)


def test_save_and_load_keep_the_adapter(tmp_path):
    from tfspec import checkpoints
    target, draft = _pair()
    checkpoints.save_model(draft, tmp_path / "draft", dtype="float32")
    loaded = checkpoints.load_model(str(tmp_path / "draft"))
    assert loaded.reads_target_encoder
    np.testing.assert_array_equal(loaded.target_encoder_projection.numpy(),
                                  draft.target_encoder_projection.numpy())
    assert loaded.target_encoder_fingerprint == draft.target_encoder_fingerprint
    assert loaded.target_encoder_name == "the test target"
    greedy = tfspec.Sampling(temperature=0.0)
    want = tfspec.generate(target, PROMPTS, draft=draft, k=2, max_new_tokens=8,
                           sampling=greedy)
    got = tfspec.generate(target, PROMPTS, draft=loaded, k=2, max_new_tokens=8,
                          sampling=greedy)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    # Saved again without it, the file goes: the loaded draft runs its own encoder.
    checkpoints.save_model(loaded.detach_target_encoder(), tmp_path / "draft")
    assert not checkpoints.load_model(str(tmp_path / "draft")).reads_target_encoder


def test_a_corrupt_adapter_file_is_a_one_line_error(tmp_path):
    from tfspec import checkpoints
    _, draft = _pair()
    checkpoints.save_model(draft, tmp_path / "draft")
    (tmp_path / "draft" / checkpoints.TARGET_ENCODER_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="is not a target-encoder adapter") as error:
        checkpoints.load_model(str(tmp_path / "draft"))
    assert "\n" not in str(error.value)


def test_attaching_or_detaching_changes_what_a_cached_loop_runs(monkeypatch):
    """The compiled loops are cached per (target, draft): one traced with the adapter must
    not serve the draft after detach_target_encoder, nor after another projection."""
    target, draft = _pair()

    def overlap():  # sum over verified drafts of sum_x min(p, q): a function of q
        stats = tfspec.generate(target, PROMPTS, draft=draft, k=2, max_new_tokens=8,
                                seed=3).stats
        return float(np.sum(stats.beta_sum))

    with_adapter = overlap()
    draft.detach_target_encoder()
    own = overlap()
    assert own != with_adapter  # a cached adapter program would give the same overlap
    draft.attach_target_encoder(_projection(seed=11), target_binding.target_fingerprint(target))
    assert overlap() not in (own, with_adapter)
