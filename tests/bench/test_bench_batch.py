"""bench.batch on tiny random models."""

import math

import numpy as np
import pytest

from bench import batch
from bench import models as bench_models
from tests.bench.bench_fixtures import CONTRACT_KEYS, TINY


def test_one_record_per_batch_size_with_per_row_acceptance():
    target = bench_models.load(TINY)
    draft = bench_models.load("ngram:unigram", vocab_size=target.vocab_size)
    pool = bench_models.prompts(TINY, target, num_prompts=3, prompt_length=5)
    result = batch.run(target, draft, pool, k=1, batch_sizes=[1, 3], max_new_tokens=6,
                       repeats=1, jit_compile=None)
    assert [r["batch_size"] for r in result["records"]] == [1, 3]
    for record in result["records"]:
        for key in CONTRACT_KEYS:
            assert math.isfinite(record[key]), key
        # Every batch size decodes the whole pool of 3: 3 batches of 1, one batch of 3.
        assert len(record["per_row_acceptance"]) == 3
        assert record["num_batches"] * record["batch_size"] == 3
        rows = record["per_row_acceptance"]
        assert (record["row_acceptance_min"], record["row_acceptance_median"],
                record["row_acceptance_max"]) == pytest.approx(
                    (min(rows), float(np.median(rows)), max(rows)))
        assert record["pays"] == (record["speedup"] > 1.0)
    paying = [r["batch_size"] for r in result["records"] if r["pays"]]
    assert result["largest_paying_batch_size"] == (max(paying) if paying else None)
