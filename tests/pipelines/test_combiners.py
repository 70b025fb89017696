"""Tests for pipelines.combiners: the per-mode reductions, directly and in a pipeline."""

import apache_beam as beam
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing import util as beam_util

from evals import latency
from pipelines import combiners


def _line(i, sample=0, passed=True, time_s=0.1, tokens=10, k=2, batch_size=1):
    return {"id": f"HumanEval/{i}", "sample": sample, "mode": "speculative",
            "output": "x", "quality": {"passed": passed, "result": "passed"},
            "time_s": time_s, "num_tokens": tokens, "batch_size": batch_size, "k": k,
            "rounds": 4, "drafted": 4 * k, "accepted": 6, "verified": 7, "beta_sum": 5.0,
            "accepted_per_position": [4, 2][:k]}


def _combine(fn, elements):
    acc = fn.create_accumulator()
    for e in elements[:len(elements) // 2]:
        acc = fn.add_input(acc, e)
    other = fn.create_accumulator()
    for e in elements[len(elements) // 2:]:
        other = fn.add_input(other, e)
    return fn.extract_output(fn.merge_accumulators([acc, other]))


def test_quality_pass_at_k_in_percent():
    elements = [(_line(0, s, passed=s < 1), "") for s in range(2)]
    elements += [(_line(1, s, passed=True), "") for s in range(2)]
    fn = combiners.QualityCombineFn("humaneval", pass_at=[1, 2])
    assert _combine(fn, elements) == {"pass@1": pytest.approx(75.0),
                                      "pass@2": pytest.approx(100.0)}


def test_quality_error_is_reported_not_raised():
    fn = combiners.QualityCombineFn("humaneval", pass_at=[2])
    assert "pass@2 needs at least 2 samples" in _combine(fn, [(_line(0), "")])["error"]
    assert combiners.QualityCombineFn("humaneval").extract_output([]) == {}


def test_rouge_bounds_do_not_depend_on_arrival_order():
    rows = [({"id": f"d{i}", "sample": 0, "output": "a b", "quality": q}, "a b c")
            for i, q in enumerate([{"rouge1": 10.0 * i, "rouge2": 1.0, "rougeL": 2.0,
                                    "rougeLsum": 3.0} for i in range(6)])]
    fn = combiners.QualityCombineFn("xsum")
    assert _combine(fn, rows) == _combine(fn, rows[::-1])


def test_latency_counts_each_batch_once():
    # Two rows of one batch of 2 (0.4 s) and one row alone (0.1 s).
    elements = [(_line(0, time_s=0.4, batch_size=2), ""), (_line(1, time_s=0.4, batch_size=2), ""),
                (_line(2, time_s=0.1), "")]
    out = _combine(combiners.LatencyCombineFn(), elements)
    assert tuple(out) == latency.KEYS
    assert out["num_tokens"] == 30
    assert out["ms_per_token"] == pytest.approx(1000 * 0.5 / 30)
    untimed = dict(_line(0), time_s=None)
    assert _combine(combiners.LatencyCombineFn(), [(untimed, "")]) is None


def test_acceptance_sums_counters():
    out = _combine(combiners.AcceptanceCombineFn(), [(_line(0), ""), (_line(1), "")])
    assert out == {"acceptance_rate": pytest.approx(12 / 16), "beta_mean": pytest.approx(10 / 14),
                   "mean_tokens_per_round": pytest.approx(20 / 8),
                   "per_position": [pytest.approx(1.0), pytest.approx(0.5)]}
    autoregressive = _combine(combiners.AcceptanceCombineFn(),
                              [(dict(_line(0, k=0), accepted=0), "")])
    assert autoregressive["acceptance_rate"] is None and autoregressive["per_position"] == []


@pytest.mark.parametrize("combine_fn, count_key, keys", [
    (combiners.RequestCostCombineFn, "rounds", ("fixed_s", "iteration_s")),
    (combiners.RequestLengthCombineFn, "num_tokens", ("fixed_s", "token_s"))])
def test_request_lines_fit_batch_one_requests_only(combine_fn, count_key, keys):
    lines = [dict(_line(i, time_s=0.01 + 0.002 * count), **{count_key: count})
             for i, count in enumerate([3, 5, 9, 12])]
    batched = [dict(_line(9, time_s=5.0, batch_size=2), **{count_key: 2})]
    out = _combine(combine_fn(), [(row, "") for row in lines + batched])
    assert out["requests"] == 4
    assert out[keys[0]] == pytest.approx(0.01) and out[keys[1]] == pytest.approx(0.002)
    assert _combine(combine_fn(), [(row, "") for row in batched]) is None


def test_mode_metrics_in_a_pipeline():
    lines = [_line(0), _line(1, passed=False), dict(_line(0), mode="autoregressive", k=0,
                                                    drafted=0, accepted=0,
                                                    accepted_per_position=[])]
    with test_pipeline.TestPipeline() as p:
        out = (p | beam.Create([(row, "") for row in lines])
               | beam.Map(lambda pair: (pair[0]["mode"], pair))
               | beam.CombinePerKey(combiners.mode_metrics_fn("humaneval"))
               | beam.MapTuple(lambda mode, m: (mode, combiners.to_metrics(m)["quality"],
                                                combiners.to_metrics(m)["latency"]["num_tokens"])))
        beam_util.assert_that(out, beam_util.equal_to([("speculative", {"pass@1": 50.0}, 20),
                                                       ("autoregressive", {"pass@1": 100.0}, 10)]))
