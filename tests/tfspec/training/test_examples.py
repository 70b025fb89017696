"""Tests of tfspec.training.examples: task prefixes, EOS, truncation, bucketed batches."""

import numpy as np
import pytest

from tfspec import load_tokenizer
from tfspec.tokenizer import TINY_CODE_TOKENIZER
from tfspec.training import examples as examples_lib

from tests.tfspec.training.tiny_data import fake_corpus, random_examples


@pytest.fixture
def corpus():
    return fake_corpus()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY_CODE_TOKENIZER)


def test_completion_uses_the_prompt_as_is_and_ends_with_eos(corpus, tokenizer):
    examples = examples_lib.make_examples(corpus, tokenizer, "train", tasks=("completion",))
    record = corpus.completion("train")[0]
    ex = examples[0]
    assert ex.task == "completion" and ex.id == "completion:" + record["id"]
    assert tokenizer.decode(ex.encoder_ids.tolist()) == record["prompt"]  # No prefix.
    assert ex.target_ids[-1] == tokenizer.eos_id
    assert tokenizer.decode(ex.target_ids[:-1].tolist()) == record["completion"]


def test_docsum_has_the_summarize_prefix(corpus, tokenizer):
    examples = examples_lib.make_examples(corpus, tokenizer, "validation", tasks=("docsum",))
    record = corpus.docsum("validation")[0]
    assert tokenizer.decode(examples[0].encoder_ids.tolist()) == "summarize: " + record["code"]
    assert tokenizer.decode(examples[0].target_ids[:-1].tolist()) == record["summary"]
    assert examples[0].target_ids[-1] == tokenizer.eos_id


def test_both_tasks_in_order(corpus, tokenizer):
    examples = examples_lib.make_examples(corpus, tokenizer, "train")
    assert [e.task for e in examples] == ["completion"] * 6 + ["docsum"] * 6
    with pytest.raises(ValueError, match="Unknown task"):
        examples_lib.make_examples(corpus, tokenizer, "train", tasks=("translate",))


def test_truncation_keeps_prompt_end_and_code_start_and_drops_eos(corpus, tokenizer):
    record = corpus.completion("train")[0]
    full = tokenizer.encode(record["prompt"])
    ex = examples_lib.make_example("completion", record, tokenizer, max_encoder_length=5,
                                   max_target_length=3)
    assert ex.encoder_ids.tolist() == full[-5:]  # Completion keeps the end of the prompt.
    body = tokenizer.encode(record["completion"])
    assert len(body) + 1 > 3
    assert ex.target_ids.tolist() == body[:3]  # Cut: no EOS.
    code = corpus.docsum("train")[0]
    ex = examples_lib.make_example("docsum", code, tokenizer, max_encoder_length=4,
                                   max_target_length=64)
    assert ex.encoder_ids.tolist() == tokenizer.encode("summarize: " + code["code"])[:4]
    assert ex.target_ids[-1] == tokenizer.eos_id


def test_pad_batch_shifts_targets_and_masks_padding():
    ex = examples_lib.Example("a", "completion", np.array([5, 6, 7], np.int32),
                              np.array([9, 9, 1], np.int32))
    batch = examples_lib.pad_batch([ex], rows=2, encoder_width=8, target_width=4)
    np.testing.assert_array_equal(batch.encoder_ids[0], [5, 6, 7, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.encoder_lengths, [3, 1])
    np.testing.assert_array_equal(batch.decoder_input_ids[0], [0, 9, 9, 1])
    np.testing.assert_array_equal(batch.target_ids[0], [9, 9, 1, 0])
    np.testing.assert_array_equal(batch.loss_mask, [[1, 1, 1, 0], [0, 0, 0, 0]])


def test_buckets_fix_the_shapes_and_cover_every_example_once_per_epoch():
    examples = random_examples(50, max_encoder=30, max_target=12)
    data = examples_lib.BucketedBatches(examples, batch_tokens=160, encoder_buckets=(16, 32),
                                        target_buckets=(8, 16), seed=3)
    seen = []
    shapes = set()
    for shape, indices in data.epoch_plan(0):
        batch = data.batch(shape, indices)
        shapes.add(batch.encoder_ids.shape + batch.target_ids.shape)
        assert batch.encoder_ids.shape[0] == data.rows(shape) == 160 // sum(shape)
        seen.extend(indices)
    assert sorted(seen) == list(range(50))
    assert len(shapes) <= 4 and {(b,) + s for b, s in
                                 ((data.rows(s), s) for s in data._groups)} == set(
                                     data.shapes)
    assert len(data) == len(data.epoch_plan(0))


def test_epoch_order_is_seeded_and_iterate_resumes_at_a_position():
    examples = random_examples(40)
    data = examples_lib.BucketedBatches(examples, 64, (16,), (8,), seed=1)
    assert data.epoch_plan(0) == data.epoch_plan(0)
    assert data.epoch_plan(0) != data.epoch_plan(1)
    it = data.iterate()
    straight = [next(it) for _ in range(len(data) + 3)]
    resumed = data.iterate(*divmod(len(data) + 1, len(data)))
    epoch, position, batch = next(resumed)
    assert (epoch, position) == straight[len(data) + 1][:2] == (1, 1)
    np.testing.assert_array_equal(batch.encoder_ids, straight[len(data) + 1][2].encoder_ids)


def test_example_longer_than_the_last_bucket_is_an_error():
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        examples_lib.BucketedBatches(random_examples(3, max_encoder=20), 64, (8,), (8,))
