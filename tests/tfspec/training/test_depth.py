"""Tests of tfspec.training.depth: a draft grown by identity decoder blocks."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec.models import T5, T5Config
from tfspec.models import target_binding
from tfspec.training import depth

from tests.tfspec.training.tiny_data import TINY_T5

ENCODER_IDS = tf.constant([[5, 6, 7, 8, 0], [9, 10, 11, 12, 13]], tf.int32)
ENCODER_LENGTHS = tf.constant([4, 5], tf.int32)
DECODER_IDS = tf.constant([[0, 14, 15, 16], [0, 17, 18, 19]], tf.int32)


@pytest.fixture(scope="module")
def draft():
    return T5(T5Config(**TINY_T5), seed=3)


def _logits(model):
    return model.forward(ENCODER_IDS, ENCODER_LENGTHS, DECODER_IDS).numpy()


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_grown_draft_has_the_layers_and_the_same_logits(draft, layers):
    grown = depth.grow_decoder(draft, layers, seed=7)
    assert grown.config.num_decoder_layers == layers
    assert len(grown.decoder_blocks) == layers
    np.testing.assert_array_equal(_logits(grown), _logits(draft))


def test_new_blocks_learn_through_their_zero_projections(draft):
    grown = depth.grow_decoder(draft, 2)
    block = grown.decoder_blocks[1]
    assert not np.any(block.ffn.wo.numpy())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(grown.forward(ENCODER_IDS, ENCODER_LENGTHS,
                                                     DECODER_IDS)))
    grads = tape.gradient(loss, [block.ffn.wo, block.self_attention.o,
                                 block.cross_attention.o])
    # Zero outputs, but random inputs to them: every projection gets a gradient.
    assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)


def test_grown_draft_keeps_its_adapter_and_vocabulary_and_decodes_alike():
    target = T5(T5Config(**{**TINY_T5, "d_model": 24}), seed=5)
    draft = T5(T5Config(**TINY_T5), seed=3)
    rng = np.random.default_rng(0)
    fingerprint = target_binding.target_fingerprint(target)
    draft.attach_target_encoder(rng.normal(size=(24, TINY_T5["d_model"])), fingerprint,
                                "zoo:x")
    draft.set_draft_vocabulary(np.arange(0, TINY_T5["vocab_size"], 2))
    grown = depth.grow_decoder(draft, 2)
    assert grown.target_encoder_fingerprint == fingerprint
    assert grown.target_encoder_name == "zoo:x"
    np.testing.assert_array_equal(grown.target_encoder_projection.numpy(),
                                  draft.target_encoder_projection.numpy())
    np.testing.assert_array_equal(grown.draft_vocab_ids, draft.draft_vocab_ids)
    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    greedy = tfspec.Sampling(temperature=0.0)
    runs = [tfspec.generate(target, prompts, draft=model, k=3, max_new_tokens=8,
                            sampling=greedy, eos_id=None) for model in (draft, grown)]
    np.testing.assert_array_equal(runs[0].tokens, runs[1].tokens)
    np.testing.assert_array_equal(runs[0].stats.accepted, runs[1].stats.accepted)


def test_refuses_to_drop_layers(draft):
    deeper = depth.grow_decoder(draft, 2)
    with pytest.raises(ValueError, match="cannot drop layers"):
        depth.grow_decoder(deeper, 1)
