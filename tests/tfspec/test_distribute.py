"""Data-parallel generate under tf.distribute gives the tokens of a single replica."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import distribute
from tfspec.models.ngram import NGram
from tfspec.testing import exact_reference as ref


def test_resolve_strategy_on_cpu_is_default():
    strategy = distribute.resolve_strategy(None)
    assert strategy.num_replicas_in_sync == 1


def test_unavailable_tpu_is_a_clear_error(monkeypatch):
    # A real resolver would wait on the network (no TPU here); make it fail as it does when
    # no TPU answers, and check the message users get.
    def no_tpu(tpu=None):
        raise ValueError("Please provide a TPU Name to connect to.")
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", no_tpu)
    with pytest.raises(ValueError, match="cannot connect to TPU 'my-tpu'.*--tpu local"):
        distribute.resolve_strategy("my-tpu")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("batch", [5, 8])
def test_mirrored_strategy_matches_no_strategy(temperature, batch):
    cpus = tf.config.list_logical_devices("CPU")
    assert len(cpus) >= 2, "tests/conftest.py configures two logical CPU devices"
    strategy = tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    rng = np.random.RandomState(0)
    target = NGram(ref.random_table(rng, 6, order=2))
    draft = NGram(ref.random_table(rng, 6, order=2))
    prompts = [[1 + i % 5] * (1 + i % 3) for i in range(batch)]
    kwargs = dict(draft=draft, k=3, max_new_tokens=10, seed=4,
                  sampling=tfspec.Sampling(temperature))
    single = tfspec.generate(target, prompts, **kwargs)
    mirrored = tfspec.generate(target, prompts, strategy=strategy, **kwargs)
    np.testing.assert_array_equal(single.tokens, mirrored.tokens)
    np.testing.assert_array_equal(single.stats.accepted, mirrored.stats.accepted)


def test_mirrored_strategy_with_t5_pair():
    from tfspec.models import T5, T5Config
    config = T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1,
                      num_decoder_layers=1, num_heads=4, relative_attention_num_buckets=8,
                      relative_attention_max_distance=16, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False, layer_norm_epsilon=1e-6, pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    cpus = tf.config.list_logical_devices("CPU")
    strategy = tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    with strategy.scope():  # Mirrored variables: each replica reads its own copy.
        target, draft = T5(config, seed=0), T5(config.replace(d_model=8, d_kv=2), seed=1)
    prompts = [[5, 6, 7], [8], [9, 10, 11, 12], [13, 14]]
    kwargs = dict(draft=draft, k=2, max_new_tokens=6, seed=1, sampling=tfspec.Sampling(1.0))
    single = tfspec.generate(target, prompts, **kwargs)
    mirrored = tfspec.generate(target, prompts, strategy=strategy, **kwargs)
    np.testing.assert_array_equal(single.tokens, mirrored.tokens)


def test_t5_created_outside_the_scope_is_a_clear_error():
    from tfspec.models import T5, T5Config
    config = T5Config(vocab_size=32, d_model=8, d_kv=2, d_ff=16, num_layers=1,
                      num_decoder_layers=1, num_heads=4, relative_attention_num_buckets=8,
                      relative_attention_max_distance=16, feed_forward_proj="relu",
                      tie_word_embeddings=True, layer_norm_epsilon=1e-6, pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    cpus = tf.config.list_logical_devices("CPU")
    strategy = tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    with pytest.raises(ValueError, match="target model was created outside strategy.scope"):
        tfspec.generate(T5(config), [[3, 4]], max_new_tokens=2, strategy=strategy)
