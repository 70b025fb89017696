"""Tests for evals.acceptance."""

import json
import types

import numpy as np
import pytest

from evals import acceptance

# Two rows, k = 3.
_ROWS = dict(rounds=[4, 2], drafted=[12, 6], accepted=[6, 3], beta_sum=[7.2, 3.0],
             accepted_per_position=[[3, 2, 1], [2, 1, 0]])


def test_hand_computed_batch():
    s = acceptance.summarize(**_ROWS)
    assert tuple(s) == acceptance.KEYS
    assert s["acceptance_rate"] == pytest.approx(9 / 18)
    assert s["beta_mean"] == pytest.approx(10.2 / 18)
    assert s["mean_tokens_per_round"] == pytest.approx((9 + 6) / 6)
    assert s["per_position"] == pytest.approx([5 / 6, 3 / 6, 1 / 6])
    json.dumps(s)


def test_explicit_verified_and_tokens():
    s = acceptance.summarize(**_ROWS, verified=[10, 5], tokens=[9, 4])
    assert s["beta_mean"] == pytest.approx(10.2 / 15)
    assert s["mean_tokens_per_round"] == pytest.approx(13 / 6)


def _assert_summaries_close(got: dict, want: dict) -> None:
    # pytest.approx does not compare nested containers (pytest >= 9.2): compare per key.
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == (pytest.approx(value) if value is not None else None), key


def test_merge_of_rows_equals_batch():
    parts = []
    for i in range(2):
        acc = acceptance.AcceptanceAccumulator.create()
        acc.add(*(np.asarray(v)[i] for v in _ROWS.values()))
        parts.append(acc)
    merged = acceptance.AcceptanceAccumulator.merge(parts).extract()
    _assert_summaries_close(merged, acceptance.summarize(**_ROWS))


def test_merge_mixed_k_pads_positions():
    a = acceptance.AcceptanceAccumulator.create().add(2, 4, 2, 1.5, [2, 0])
    b = acceptance.AcceptanceAccumulator.create().add(2, 8, 4, 3.0, [2, 1, 1, 0])
    merged = acceptance.AcceptanceAccumulator.merge([a, b]).extract()
    assert merged["per_position"] == pytest.approx([1.0, 0.25, 0.25, 0.0])
    assert merged["acceptance_rate"] == pytest.approx(6 / 12)


def test_autoregressive_rows_give_none_ratios():
    s = acceptance.summarize(rounds=[5], drafted=[0], accepted=[0], beta_sum=[0.0],
                             accepted_per_position=np.zeros((1, 0)))
    assert s["acceptance_rate"] is None and s["beta_mean"] is None
    assert s["mean_tokens_per_round"] == 1.0 and s["per_position"] == []
    assert acceptance.AcceptanceAccumulator.create().extract()["mean_tokens_per_round"] is None


def test_add_stats_duck_types_decode_stats():
    stats = types.SimpleNamespace(**{k: np.asarray(v) for k, v in _ROWS.items()})
    s = acceptance.AcceptanceAccumulator.create().add_stats(stats).extract()
    _assert_summaries_close(s, acceptance.summarize(**_ROWS))


@pytest.mark.parametrize("change", [
    {"accepted": [13, 3]},                                 # accepted > drafted
    {"drafted": [12]},                                     # wrong batch
    {"accepted_per_position": [[1, 2, 3]]},                # wrong batch
])
def test_rejects_inconsistent_counts(change):
    with pytest.raises(ValueError):
        acceptance.summarize(**dict(_ROWS, **change))
