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


def _task(name: str, module, description: str, load: Optional[Callable[..., list]] = None,
          **extra) -> Task:
    """A `Task` built from the functions and constants of task `module`.

    `load` defaults to `module.load`; `extra` sets the remaining `Task` fields
    (`default_split`, `executes_code`).
    """
    return Task(
        name=name,
        description=description,
        load=load or module.load,
        format_prompt=module.format_prompt,
        postprocess=module.postprocess,
        score_samples=module.score_samples,
        aggregate=module.aggregate,
        metric_names=module.metric_names(),
        data_sources=module.DATA_SOURCES,
        field_options=getattr(module, "FIELD_OPTIONS", ()),
        **extra,
    )


TASKS = {
    "humaneval": _task(
        "humaneval", humaneval,
        "HumanEval: 164 Python problems, pass@k by sandboxed execution",
        executes_code=True),
    "xsum": _task(
        "xsum", summarization,
        "XSum one-sentence news summarization, ROUGE",
        load=functools.partial(summarization.load, "xsum")),
    "cnn_dailymail": _task(
        "cnn_dailymail", summarization,
        "CNN/DailyMail (3.x) news summarization, ROUGE",
        load=functools.partial(summarization.load, "cnn_dailymail")),
    "wmt_ende": _task(
        "wmt_ende", translation,
        "WMT English-German translation, sacrebleu BLEU"),
    "docsum": _task(
        "docsum", docsum,
        "Docstring summarization of Python code (offline default), ROUGE",
        default_split=docsum.DEFAULT_SPLIT),
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
