"""Beam CombineFns that reduce the records of one mode to its summary.json entry.

Each wraps a mergeable accumulator of `evals` and consumes `(line, reference)` pairs, where
`line` is an examples.jsonl record (fresh or read back by a resumed run) and `reference`
the example's reference output:

* `QualityCombineFn`: the task's `aggregate` over all samples (pass@k in percent, ROUGE,
  BLEU). Corpus metrics need every sample, so the accumulator is the list of
  (id, sample, reference, output, quality); it is sorted by (id, sample) before
  aggregating, so bootstrap bounds do not depend on the order workers finished in.
* `LatencyCombineFn`: `evals.latency.LatencyAccumulator` (per-sequence times and tokens;
  the run time is the sum of call times, each call counted once: time_s / batch_size per row).
* `AcceptanceCombineFn`: `evals.acceptance.AcceptanceAccumulator` (counter sums).
* `RequestCostCombineFn`: `evals.request_cost.RequestCostAccumulator` (the least-squares
  line of a batch-1 request's seconds on its rounds, which the calibrated model reads).
* `RequestLengthCombineFn`: `evals.request_cost.RequestLengthAccumulator` (the line of a
  batch-1 request's seconds on its tokens, which the length-matched speed-up reads).

`mode_metrics_fn(task, pass_at)` combines the five in one pass and `to_metrics` names the
result: {"quality": ..., "latency": ... or None, "acceptance": ... or None,
"request_cost": ... or None, "request_length": ... or None}.
"""

from typing import Any, Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.transforms import combiners as beam_combiners

from evals import acceptance
from evals import datasources
from evals import latency
from evals import request_cost
from evals import summary
from evals import tasks
from evals.example import Example


class QualityCombineFn(beam.CombineFn):
    """The task's aggregate quality of one mode's records.

    Args:
      task_name: an `evals.tasks` name.
      pass_at: the pass@k to report (HumanEval), None for the task's default.
    """

    def __init__(self, task_name: str, pass_at: Optional[Sequence[int]] = None):
        self._task_name = task_name
        self._pass_at = None if pass_at is None else [int(k) for k in pass_at]

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, element):
        line, reference = element
        accumulator.append((str(line["id"]), int(line["sample"]), reference, line["output"],
                            line["quality"]))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]):
        merged = []
        for acc in accumulators:
            merged.extend(acc)
        return merged

    def extract_output(self, accumulator) -> dict:
        if not accumulator:
            return {}
        items = sorted(accumulator, key=lambda item: (item[0], item[1]))
        task = tasks.get_task(self._task_name)
        examples = [Example(id=i, source="", prompt="", reference=ref)
                    for i, _, ref, _, _ in items]
        outputs = [output for _, _, _, output, _ in items]
        qualities = [quality for _, _, _, _, quality in items]
        options = {"ks": self._pass_at} if self._task_name == "humaneval" and self._pass_at \
            else {}
        try:
            return summary.report_quality(task.aggregate(examples, outputs, qualities,
                                                         **options))
        except (ValueError, KeyError, TypeError) as e:
            # E.g. pass@k when failed samples left a problem with fewer than k samples.
            return {"error": datasources.one_line(e)}


class LatencyCombineFn(beam.CombineFn):
    """`evals.latency` summary of one mode's records (None when none was timed)."""

    def create_accumulator(self):
        return latency.LatencyAccumulator.create()

    def add_input(self, accumulator, element):
        line, _ = element
        if line.get("time_s") is None:
            return accumulator
        accumulator.add(line["time_s"], line["num_tokens"])
        accumulator.add_total_time(line["time_s"] / max(1, int(line.get("batch_size") or 1)))
        return accumulator

    def merge_accumulators(self, accumulators):
        return latency.LatencyAccumulator.merge(accumulators)

    def extract_output(self, accumulator) -> Optional[dict]:
        return accumulator.extract() if accumulator.seq_times_s else None


class AcceptanceCombineFn(beam.CombineFn):
    """`evals.acceptance` statistics of one mode's records (None without counters)."""

    def create_accumulator(self):
        return acceptance.AcceptanceAccumulator.create()

    def add_input(self, accumulator, element):
        line, _ = element
        if line.get("rounds") is None:
            return accumulator
        accumulator.add(line["rounds"], line["drafted"], line["accepted"], line["beta_sum"],
                        line["accepted_per_position"], verified=line["verified"],
                        tokens=line["num_tokens"])
        return accumulator

    def merge_accumulators(self, accumulators):
        return acceptance.AcceptanceAccumulator.merge(accumulators)

    def extract_output(self, accumulator) -> Optional[dict]:
        return accumulator.extract() if accumulator.rows else None


class RequestCostCombineFn(beam.CombineFn):
    """`evals.request_cost` line of one mode's batch-1 records on their rounds (None
    without a fit)."""

    accumulator_cls = request_cost.RequestCostAccumulator
    count_key = "rounds"

    def create_accumulator(self):
        return self.accumulator_cls.create()

    def add_input(self, accumulator, element):
        line, _ = element
        # A batched call's time is shared by rows of different rounds: batch 1 only.
        if (line.get("time_s") is None or line.get(self.count_key) is None
                or int(line.get("batch_size") or 1) != 1):
            return accumulator
        accumulator.add(line["time_s"], line[self.count_key])
        return accumulator

    def merge_accumulators(self, accumulators):
        return self.accumulator_cls.merge(accumulators)

    def extract_output(self, accumulator) -> Optional[dict]:
        return accumulator.extract()


class RequestLengthCombineFn(RequestCostCombineFn):
    """`evals.request_cost` line of one mode's batch-1 records on their emitted tokens
    (None without a fit)."""

    accumulator_cls = request_cost.RequestLengthAccumulator
    count_key = "num_tokens"


def mode_metrics_fn(task_name: str, pass_at: Optional[Sequence[int]] = None) -> beam.CombineFn:
    """One CombineFn computing (quality, latency, acceptance, request cost, request length)
    of the same inputs."""
    return beam_combiners.SingleInputTupleCombineFn(
        QualityCombineFn(task_name, pass_at), LatencyCombineFn(), AcceptanceCombineFn(),
        RequestCostCombineFn(), RequestLengthCombineFn())


def to_metrics(combined: Sequence[Any]) -> dict:
    """Names the output of `mode_metrics_fn`."""
    quality, latency_summary, acceptance_summary, cost, length = combined
    return {"quality": quality, "latency": latency_summary, "acceptance": acceptance_summary,
            "request_cost": cost, "request_length": length}
