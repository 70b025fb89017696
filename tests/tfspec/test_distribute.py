"""Data-parallel generate under tf.distribute gives the tokens of a single replica."""

import numpy as np
import pytest
import tensorflow as tf

import tfspec
from tfspec import distribute
from tfspec.models.ngram import NGram
from tests.tfspec import exact_reference as ref


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
