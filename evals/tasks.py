"""The evaluation tasks: an explicit table from task name to `Task`.

A `Task` bundles plain functions that the pipeline calls in order:

    task = get_task("xsum")
    examples = task.load(split, data_source, data_path, limit, **field_names)
    prompts = [task.format_prompt(e) for e in examples]        # == e.prompt
    outputs = [task.postprocess(text, e) for text, e in ...]   # stop rules
    qualities = task.score_samples(examples, outputs)          # one dict per sample
    summary = task.aggregate(examples, outputs, qualities)     # {metric: value}

`score_samples` gives the per-sample `quality{...}` of examples.jsonl (HumanEval:
{"passed", "result"}); `aggregate` gives the run's `quality{...}` in summary.json
(HumanEval: pass@k; summarization and docsum: ROUGE with bootstrap bounds; translation:
BLEU). Several samples of one example are passed as repeated examples.
"""

import dataclasses
import functools
from typing import Any, Callable, Mapping, Optional, Sequence

from evals import docsum
from evals import humaneval
from evals import summarization
from evals import translation
from evals.example import Example


@dataclasses.dataclass(frozen=True)
class Task:
    """An evaluation task.

    Attributes:
      name: Key in TASKS and value of `--task`.
      description: One line for help texts.
      load: `load(split, data_source, data_path, limit, **field_names) -> list[Example]`.
      format_prompt: `format_prompt(example) -> str`, the text fed to the model.
      postprocess: `postprocess(text, example) -> str`, stop rules applied to a raw output.
      score_samples: `score_samples(examples, outputs, **options) -> list[dict]`.
      aggregate: `aggregate(examples, outputs, qualities, **options) -> dict`.
      metric_names: The headline keys of `aggregate`'s result.
      data_sources: Accepted `data_source` values, the default first.
      default_split: Split used when none is given.
      field_options: Accepted `**field_names` keywords of `load`.
      executes_code: True if scoring runs generated code (in the sandbox).
    """

    name: str
    description: str
    load: Callable[..., list]
    format_prompt: Callable[[Example], str]
    postprocess: Callable[[str, Example], str]
    score_samples: Callable[..., list]
    aggregate: Callable[..., dict]
    metric_names: tuple
    data_sources: tuple
    default_split: str = "test"
    field_options: tuple = ()
    executes_code: bool = False

    def score(self, examples: Sequence[Example], outputs: Sequence[str],
              sample_options: Optional[Mapping[str, Any]] = None,
              aggregate_options: Optional[Mapping[str, Any]] = None) -> dict:
        """`aggregate(score_samples(...))` in one call."""
        qualities = self.score_samples(examples, outputs, **(sample_options or {}))
        return self.aggregate(examples, outputs, qualities, **(aggregate_options or {}))


TASKS = {
    "humaneval": Task(
        name="humaneval",
        description="HumanEval: 164 Python problems, pass@k by sandboxed execution",
        load=humaneval.load,
        format_prompt=humaneval.format_prompt,
        postprocess=humaneval.postprocess,
        score_samples=humaneval.score_samples,
        aggregate=humaneval.aggregate,
        metric_names=humaneval.metric_names(),
        data_sources=humaneval.DATA_SOURCES,
        executes_code=True,
    ),
    "xsum": Task(
        name="xsum",
        description="XSum one-sentence news summarization, ROUGE",
        load=functools.partial(summarization.load, "xsum"),
        format_prompt=summarization.format_prompt,
        postprocess=summarization.postprocess,
        score_samples=summarization.score_samples,
        aggregate=summarization.aggregate,
        metric_names=summarization.metric_names(),
        data_sources=summarization.DATA_SOURCES,
        field_options=summarization.FIELD_OPTIONS,
    ),
    "cnn_dailymail": Task(
        name="cnn_dailymail",
        description="CNN/DailyMail (3.x) news summarization, ROUGE",
        load=functools.partial(summarization.load, "cnn_dailymail"),
        format_prompt=summarization.format_prompt,
        postprocess=summarization.postprocess,
        score_samples=summarization.score_samples,
        aggregate=summarization.aggregate,
        metric_names=summarization.metric_names(),
        data_sources=summarization.DATA_SOURCES,
        field_options=summarization.FIELD_OPTIONS,
    ),
    "wmt_ende": Task(
        name="wmt_ende",
        description="WMT English-German translation, sacrebleu BLEU",
        load=translation.load,
        format_prompt=translation.format_prompt,
        postprocess=translation.postprocess,
        score_samples=translation.score_samples,
        aggregate=translation.aggregate,
        metric_names=translation.metric_names(),
        data_sources=translation.DATA_SOURCES,
        field_options=translation.FIELD_OPTIONS,
    ),
    "docsum": Task(
        name="docsum",
        description="Docstring summarization of Python code (offline default), ROUGE",
        load=docsum.load,
        format_prompt=docsum.format_prompt,
        postprocess=docsum.postprocess,
        score_samples=docsum.score_samples,
        aggregate=docsum.aggregate,
        metric_names=docsum.metric_names(),
        data_sources=docsum.DATA_SOURCES,
        default_split=docsum.DEFAULT_SPLIT,
        field_options=docsum.FIELD_OPTIONS,
    ),
}


def get_task(name: str) -> Task:
    """The task called `name`.

    Raises:
      ValueError: for an unknown name, listing the known ones.
    """
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") \
            from None
