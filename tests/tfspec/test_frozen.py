"""tfspec.frozen: frozen models skip the per-request check of their kernel panels.

One target/draft pair serves every test (weights swapped in and restored), so the module
compiles four programs: each compiled program stays in memory until the worker ends.
"""

import contextlib

import numpy as np
import pytest

import tfspec
from tfspec import frozen, generation, kernels
from tfspec.models import T5, T5Config

pytestmark = pytest.mark.skipif(not kernels.usable_outside_trace(),
                                reason=f"needs the kernel: {kernels.status()}")

PROMPTS = [[5, 6, 7, 8], [9, 10]]


def _model(seed):
    config = T5Config(vocab_size=37, d_model=24, d_kv=6, d_ff=40, num_layers=1,
                      num_decoder_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False)
    return T5(config, seed=seed)


@pytest.fixture(scope="module")
def models():
    """(target, draft, other): `other` only lends its weights (`_swapped`)."""
    return _model(3), _model(4), _model(11)


@contextlib.contextmanager
def _swapped(model, source):
    """`model` holds `source`'s weights within the block (as training would change them)."""
    saved = [w.numpy() for w in model.weights]
    for mine, theirs in zip(model.weights, source.weights):
        mine.assign(theirs)
    try:
        yield
    finally:
        for mine, value in zip(model.weights, saved):
            mine.assign(value)


def _decode(target, draft=None, temperature=0.0):
    return tfspec.generate(target, PROMPTS, draft=draft, k=3 if draft is not None else 0,
                           max_new_tokens=12, seed=2,
                           sampling=tfspec.Sampling(temperature=temperature))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_frozen_models_decode_what_checked_models_decode_with_the_same_program(
        models, temperature):
    target, draft, _ = models
    checked = _decode(target, draft, temperature)
    programs = generation.compiled_loops(target)
    traces = [f.experimental_get_tracing_count() for f in programs]
    with tfspec.frozen_weights(target, draft):
        assert frozen.is_frozen(target) and frozen.is_frozen(draft)
        got = _decode(target, draft, temperature)
    assert not frozen.is_frozen(target) and not frozen.is_frozen(draft)
    np.testing.assert_array_equal(got.tokens, checked.tokens)
    np.testing.assert_array_equal(got.stats.accepted, checked.stats.accepted)
    # The check is a branch of the one program: freezing compiled nothing.
    assert generation.compiled_loops(target) == programs
    assert [f.experimental_get_tracing_count() for f in programs] == traces


def test_a_frozen_model_skips_its_check_and_unfreezing_reports_changed_weights(models):
    """While frozen, changed weights are not detected (the panels stay those of the old
    weights: the check is really skipped); unfreezing says so, and decoding then follows
    the new weights again."""
    model, _, other = models
    before = _decode(model).tokens
    with _swapped(model, other):
        want = _decode(model).tokens  # Checked: re-packed for these weights.
    assert not np.array_equal(want, before)  # The test needs outputs that differ.

    tfspec.freeze_weights(model)
    np.testing.assert_array_equal(_decode(model).tokens, before)
    with _swapped(model, other):  # The misuse: a frozen model's weights change.
        # The encoder and the norms read the new weights, the decode products the old
        # panels.
        assert not np.array_equal(_decode(model).tokens, want)
        with pytest.raises(frozen.WeightsChangedError, match="T5 changed while frozen"):
            tfspec.unfreeze_weights(model)
        assert not frozen.is_frozen(model)
        np.testing.assert_array_equal(_decode(model).tokens, want)
    np.testing.assert_array_equal(_decode(model).tokens, before)
    tfspec.unfreeze_weights(model)  # Unfreezing a model that is not frozen does nothing.


def test_freezing_packs_the_weights_of_the_moment(models):
    """Weights changed after the last call and before freezing are the ones decoded."""
    model, _, other = models
    before = _decode(model).tokens
    with _swapped(model, other):
        with tfspec.frozen_weights(model):
            got = _decode(model).tokens
        want = _decode(model).tokens  # Checked.
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, before)


@pytest.mark.parametrize("frozen_side", ["target", "draft"])
def test_the_side_that_is_not_frozen_is_still_checked(models, frozen_side):
    """A frozen target with a draft in training (or the reverse): the unfrozen model's
    changed weights are decoded, as if it had never been frozen."""
    target, draft, other = models
    still, changing = (target, draft) if frozen_side == "target" else (draft, target)
    before = _decode(target, draft)
    with _swapped(changing, other):
        want = _decode(target, draft)  # Checked.
    # The test needs outputs that differ: the acceptance counts follow both models.
    assert not np.array_equal(want.stats.accepted, before.stats.accepted)
    _decode(target, draft)  # Packed for the restored weights.
    with tfspec.frozen_weights(still):
        with _swapped(changing, other):
            got = _decode(target, draft)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.stats.accepted, want.stats.accepted)


def test_models_frozen_before_a_block_stay_frozen_and_errors_unfreeze(models):
    target, draft, _ = models
    tfspec.freeze_weights(target)
    with pytest.raises(KeyError):
        with tfspec.frozen_weights(target, draft, None):
            assert frozen.is_frozen(draft)
            raise KeyError("inside the block")
    assert frozen.is_frozen(target) and not frozen.is_frozen(draft)
    tfspec.unfreeze_weights(target)
    assert not frozen.is_frozen(target)


def test_models_without_panels_freeze_and_decode(models):
    target = models[0]
    draft = tfspec.models.NGram.fit([[5, 6, 7, 8, 9, 10]] * 3, order=2,
                                    vocab_size=target.vocab_size)
    want = _decode(target, draft)
    with tfspec.frozen_weights(target, draft):
        got = _decode(target, draft)
    np.testing.assert_array_equal(got.tokens, want.tokens)
