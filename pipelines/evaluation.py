"""The evaluation pipeline: generate, score, journal, combine, write the run's files.

    work items ─ Reshuffle ─ RunInference(TfspecModelHandler) ─┬─ calibration records ─────┐
                                   (failed batches) ──────┐    └─ generation records       │
    completions (score-only mode) ────────────────────────┼──────────┤                      │
                                                          │       Score (task; sandbox)     │
                                                          │  (failures)─┤                   │
                                                          │       JournalWrite → examples.jsonl
                                                          │             │  + resumed lines   │
                                                          │       CombinePerKey(mode):       │
                                                          │       quality, latency, accept.  │
                                                          └──> dead letters ──> Finalize <───┘
                                                               summary.json, sweep.json,
                                                               dead_letter.jsonl

* Work items are (example, sample) pairs (`evals.records.WorkItem`), each asking for the
  modes its key still misses; `RunInference` batches `batch_size` of them and the handler
  returns one record per (item, mode) (`pipelines.generation`).
* Scoring is its own stage (`ScoreFn`): the task's post-processing (HumanEval's stop
  rules), then its per-sample scorer (the sandbox for HumanEval).
* `JournalWriteFn` appends each scored record to examples.jsonl as soon as it exists
  (`pipelines.journal`: complete lines only, each key once, safe across processes).
* Records of one mode are reduced with `pipelines.combiners`; a resumed run feeds the lines
  it read back through the same combiners.
* A batch whose generation raises, or a record whose scoring raises, becomes a dead letter
  (id, sample, modes, stage, reason) instead of failing the run; dead letters are not in
  examples.jsonl, so `--resume` retries them.
* `FinalizeFn` runs once, after everything above, and writes the files with Beam
  FileSystems (local paths or gs://).
"""

import dataclasses
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.ml.inference import base as inference_base

from evals import datasources
from evals import provenance
from evals import records
from evals import summary as summary_lib
from evals import tasks
from pipelines import combiners
from pipelines import generation
from pipelines import journal as journal_lib
from pipelines import outputs
from pipelines import status

DEAD_LETTER_TAG = "dead_letter"


@dataclasses.dataclass
class EvaluationConfig:
    """What the pipeline needs besides its inputs (picklable).

    Attributes:
      task: `evals.tasks` name.
      output_dir: the run's folder.
      modes: the run's (mode, k) pairs.
      sweep_ks: Ks listed in sweep.json (empty: no sweep.json).
      pass_at: pass@k to report (HumanEval), None for the default.
      header: summary.json header values except `finished_at`.
      model_spec: what workers load (None in completions mode).
      inference_args: `pipelines.generation.inference_args(...)`.
      batch_size: rows per generate call.
      large_model: share one model copy per machine.
      journal_backend: None (by path), "local" or "parts".
      score_options: keyword arguments of the task's `score_samples`.
    """

    task: str
    output_dir: str
    modes: Tuple[Tuple[str, int], ...]
    sweep_ks: Tuple[int, ...] = ()
    pass_at: Optional[Tuple[int, ...]] = None
    header: Dict[str, Any] = dataclasses.field(default_factory=dict)
    model_spec: Optional[generation.ModelSpec] = None
    inference_args: Dict[str, Any] = dataclasses.field(default_factory=dict)
    batch_size: int = 1
    large_model: bool = False
    journal_backend: Optional[str] = None
    score_options: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def journal(self) -> journal_lib.Journal:
        return journal_lib.Journal(self.output_dir, self.journal_backend)


def _reason(error: Any) -> str:
    """One line from an exception, or from Beam's (type, repr, traceback) triple."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {datasources.one_line(error, 500)}"
    if isinstance(error, (tuple, list)) and len(error) >= 2:
        formatted = error[2] if len(error) >= 3 else None
        if isinstance(formatted, (list, tuple)) and formatted:
            return datasources.one_line(formatted[-1], 500)  # "Type: message" of traceback.
        kind = getattr(error[0], "__name__", str(error[0]))
        return f"{kind}: {datasources.one_line(error[1], 500)}"
    return datasources.one_line(error, 500)


def dead_letter(item: records.WorkItem, stage: str, reason: str,
                modes: Optional[Sequence[str]] = None) -> dict:
    """A dead-letter record: which key(s) failed where, and why."""
    return records.sanitize({
        "id": item.id, "sample": item.sample, "kind": item.kind,
        "modes": list(modes) if modes is not None else (
            None if item.modes is None else [m for m, _ in item.modes]),
        "stage": stage, "reason": reason})


def _failed_batch_letters(failed) -> List[dict]:
    """Dead letters of a batch RunInference could not process: (batch, error)."""
    batch, error = failed
    items = batch if isinstance(batch, (list, tuple)) else [batch]
    return [dead_letter(item, "generate", _reason(error)) for item in items
            if isinstance(item, records.WorkItem)]


class SplitResultsFn(beam.DoFn):
    """PredictionResult(item, record) -> (item, record), calibration records tagged apart."""

    CALIBRATION = "calibration"

    def process(self, result: inference_base.PredictionResult):
        if result.inference.get("kind") == generation.CALIBRATION:
            yield beam.pvalue.TaggedOutput(self.CALIBRATION, result.inference)
        else:
            yield result.example, result.inference


def completion_record(item: records.WorkItem, completion: str) -> dict:
    """The record of an existing completion (no model: counters and time are None).

    A completion that UTF-8 cannot encode (a lone surrogate) travels escaped, with
    `text_problem` set, and `ScoreFn` makes it that record's dead letter.
    """
    record = {"kind": generation.GENERATION, "id": item.id, "sample": item.sample,
              "mode": records.COMPLETIONS, "k": None,
              "prompt_sha256": records.prompt_sha256(records.safe_text(item.example.prompt)),
              "prompt": records.safe_text(item.example.prompt),
              "raw_output": records.safe_text(completion), "num_tokens": None,
              "time_s": None, "batch_size": None}
    problem = records.text_problem(completion)
    if problem:
        record["text_problem"] = f"the completion cannot be scored: {problem}"
    return record


class ScoreFn(beam.DoFn):
    """Post-processes and scores one record: (item, record) -> (line, reference).

    Completions (mode "completions") are scored as given. Exceptions, and text UTF-8 cannot
    encode, become dead letters; every string of the line and of a dead letter is made
    encodable (`records.sanitize`: a candidate's error message may hold lone surrogates),
    so nothing one record holds can fail the run.
    """

    def __init__(self, task_name: str, score_options: Optional[Dict[str, Any]] = None):
        self._task_name = task_name
        self._options = dict(score_options or {})

    def setup(self):
        self._task = tasks.get_task(self._task_name)

    def process(self, element):
        item, record = element
        try:
            raw = record["raw_output"]
            problem = record.get("text_problem") or records.text_problem(raw)
            if problem:
                raise ValueError(problem)
            if record["mode"] == records.COMPLETIONS:
                output = raw
            else:
                output = self._task.postprocess(raw, item.example)
            if self._task.executes_code:
                status.report_phase("scoring in the sandbox")
            quality = self._task.score_samples([item.example], [output], **self._options)[0]
            line = records.sanitize(records.make_line(record, output, quality))
            yield line, records.safe_text(item.example.reference)
        except Exception as e:  # noqa: BLE001  Any failure of one record is its own.
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTER_TAG, dead_letter(item, "score", _reason(e), [record["mode"]]))


class JournalWriteFn(beam.DoFn):
    """Appends each (line, reference) to examples.jsonl (once per key), passes it on."""

    def __init__(self, journal: journal_lib.Journal):
        self._journal = journal

    def process(self, element):
        line, _ = element
        self._journal.append(line)
        yield element

    def teardown(self):
        self._journal.close()


class FinalizeFn(beam.DoFn):
    """Writes dead_letter.jsonl, summary.json and sweep.json; yields the summary."""

    def __init__(self, config: EvaluationConfig):
        self._config = config

    def process(self, unused_element, metrics, calibrations, dead_letters):
        config = self._config
        status.report_phase("writing outputs")
        by_mode = {mode: combiners.to_metrics(value) for mode, value in metrics}
        # The costs the run's own requests measured join the calibration record: the
        # calibrated model prefers them (evals.summary.round_cost).
        calibration = summary_lib.with_in_run_costs(pick_calibration(calibrations),
                                                    config.modes, by_mode)
        letters = sorted(dead_letters, key=lambda d: (str(d["id"]), d["sample"], d["stage"]))
        outputs.write_bytes(outputs.join(config.output_dir, outputs.DEAD_LETTER),
                            "".join(records.dumps(d) for d in letters).encode("utf-8"))
        config.journal().finalize()
        header = dict(config.header, finished_at=provenance.now())
        extra = {"num_failed": len(letters), "calibration": calibration}
        result = summary_lib.build_summary(header, config.modes, by_mode, calibration, extra)
        outputs.write_json(outputs.join(config.output_dir, outputs.SUMMARY), result)
        if config.sweep_ks:
            sweep = summary_lib.build_sweep(config.modes, by_mode, calibration,
                                            config.sweep_ks)
            outputs.write_json(outputs.join(config.output_dir, outputs.SWEEP), sweep)
        yield result


def pick_calibration(calibrations: Sequence[dict]) -> Optional[dict]:
    """The calibration record of a run (median c if a runner produced several)."""
    valid = [c for c in calibrations if c.get("draft_cost_ratio") is not None]
    if not valid:
        return dict(calibrations[0]) if calibrations else None
    valid.sort(key=lambda c: c["draft_cost_ratio"])
    chosen = dict(valid[(len(valid) - 1) // 2])
    if len(valid) > 1:
        chosen["draft_cost_ratio"] = statistics.median(c["draft_cost_ratio"] for c in valid)
    return chosen


def build(pipeline: beam.Pipeline, config: EvaluationConfig,
          work: Sequence[records.WorkItem] = (),
          completions: Sequence[Tuple[records.WorkItem, str]] = (),
          resumed: Sequence[Tuple[dict, str]] = ()) -> beam.PCollection:
    """Adds the evaluation to `pipeline`; returns the PCollection of the one summary.

    Args:
      pipeline: the Beam pipeline.
      config: settings.
      work: generation items (and the calibration item).
      completions: (item, completion) pairs to score (completions mode).
      resumed: (line, reference) pairs of finished records read back from examples.jsonl.
    """
    to_score, dead, calibrations = [], [], []
    if work:
        handler = generation.TfspecModelHandler(config.model_spec, config.batch_size,
                                                config.large_model)
        results, failed = (
            pipeline
            | "WorkItems" >> beam.Create(list(work))
            | "Spread" >> beam.Reshuffle()
            | "Generate" >> inference_base.RunInference(
                handler, inference_args=config.inference_args).with_exception_handling())
        split = results | "SplitCalibration" >> beam.ParDo(SplitResultsFn()).with_outputs(
            SplitResultsFn.CALIBRATION, main="records")
        to_score.append(split.records)
        calibrations.append(split[SplitResultsFn.CALIBRATION])
        dead.append(failed.failed_inferences
                    | "GenerateDeadLetters" >> beam.FlatMap(_failed_batch_letters))
    if completions:
        to_score.append(
            pipeline
            # Records are made before Create: Beam encodes a bare string as UTF-8.
            | "Completions" >> beam.Create([(item, completion_record(item, text))
                                            for item, text in completions])
            | "SpreadCompletions" >> beam.Reshuffle())
    lines = []
    if to_score:
        scored = (to_score | "ToScore" >> beam.Flatten()
                  | "Score" >> beam.ParDo(ScoreFn(config.task, config.score_options))
                  .with_outputs(DEAD_LETTER_TAG, main="lines"))
        dead.append(scored[DEAD_LETTER_TAG])
        lines.append(scored.lines | "JournalWrite" >> beam.ParDo(
            JournalWriteFn(config.journal())))
    if resumed:
        lines.append(pipeline | "Resumed" >> beam.Create(list(resumed)))
    metrics = _to_list(pipeline, "Metrics", [
        lines | "AllLines" >> beam.Flatten()
        | "ByMode" >> beam.Map(lambda pair: (pair[0]["mode"], pair))
        | "CombineModes" >> beam.CombinePerKey(
            combiners.mode_metrics_fn(config.task, config.pass_at))] if lines else [])
    calibration_list = _to_list(pipeline, "Calibrations", calibrations)
    dead_list = _to_list(pipeline, "DeadLetters", dead)
    return (pipeline
            | "FinalizeTrigger" >> beam.Create([None])
            | "Finalize" >> beam.ParDo(FinalizeFn(config),
                                       beam.pvalue.AsSingleton(metrics),
                                       beam.pvalue.AsSingleton(calibration_list),
                                       beam.pvalue.AsSingleton(dead_list)))


def _to_list(pipeline, label: str, pcolls: List[beam.PCollection]) -> beam.PCollection:
    """One PCollection holding the list of all elements of `pcolls` ([] if none)."""
    if not pcolls:
        return pipeline | f"{label}Empty" >> beam.Create([[]])
    merged = pcolls[0] if len(pcolls) == 1 else pcolls | f"{label}Flatten" >> beam.Flatten()
    return merged | f"{label}ToList" >> beam.combiners.ToList()


def run(config: EvaluationConfig, options, work=(), completions=(), resumed=()):
    """Builds and runs the pipeline to completion; returns the Beam PipelineResult."""
    pipeline = beam.Pipeline(options=options)
    build(pipeline, config, work, completions, resumed)
    result = pipeline.run()
    result.wait_until_finish()
    return result
