"""What an evaluation run has to do: its examples, the records still missing, the rest.

    examples = load_examples(spec)                       # UsageError if the data is missing
    plan = make_plan(spec, examples, finished_lines)     # finished_lines: examples.jsonl

A run's records are the keys (id, sample, mode) for its examples, samples in
[0, num_samples) and modes (`RunSpec.modes`). Lines already in examples.jsonl (a resumed
run) are not generated again: a `WorkItem` asks only for the modes its key still misses,
and the finished lines that belong to the run are aggregated together with the new ones.
Lines of other keys (a larger --limit or another --k_sweep before) stay in the file but are
not part of this run's summary.

In completions mode (`--completions FILE`, HumanEval's `task_id`/`completion` JSONL) the
n-th completion of a task id is its sample n, scored as given (no post-processing, as the
reference harness does), under the mode "completions".
"""

import collections
import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from evals import datasources
from evals import humaneval
from evals import records
from evals import tasks
from evals.example import Example
from evals.orchestration.spec import RunSpec
from evals.orchestration.spec import UsageError


@dataclasses.dataclass
class RunPlan:
    """The work of a run.

    Attributes:
      spec: the run's settings.
      examples: the examples of the run, in task order.
      work: generation items still to do (plus one calibration item when a draft is used).
      completions: (item, completion) pairs still to score, in completions mode.
      resumed: finished lines (dicts) of this run's keys, read from examples.jsonl.
      num_samples: samples per example (in completions mode: the most any problem has).
      total_records: number of keys of the run.
    """

    spec: RunSpec
    examples: List[Example]
    work: List[records.WorkItem]
    completions: List[Tuple[records.WorkItem, str]]
    resumed: List[dict]
    num_samples: int
    total_records: int

    @property
    def pending_records(self) -> int:
        """Records this invocation will produce."""
        return self.total_records - len(self.resumed)

    def pending_keys(self) -> List[Tuple[str, int, str, Optional[int]]]:
        """(id, sample, mode, k) of the records this invocation will produce (k None for
        completions)."""
        keys = [(item.id, item.sample, records.COMPLETIONS, None)
                for item, _ in self.completions]
        for item in self.work:
            if item.kind == records.GENERATE:
                keys += [(item.id, item.sample, mode, records.draft_length(k))
                         for mode, k in (item.modes or self.spec.modes)]
        return keys


def load_examples(spec: RunSpec) -> List[Example]:
    """The run's examples.

    Raises:
      UsageError: the data cannot be loaded (message says how to get it), is empty, or has
        duplicate ids.
    """
    task = tasks.get_task(spec.task)
    try:
        examples = task.load(task.default_split, spec.data_source, spec.data_path, spec.limit)
    except datasources.DataUnavailableError as e:
        raise UsageError(str(e)) from None
    except (ValueError, TypeError, KeyError, OSError) as e:
        raise UsageError(f"cannot load the {spec.task} data: {datasources.one_line(e)}; check "
                         f"--data_source/--data_path") from None
    if not examples:
        raise UsageError(f"the {spec.task} data has no examples; check --data_path/--limit")
    counts = collections.Counter(e.id for e in examples)
    duplicated = [i for i, n in counts.items() if n > 1]
    if duplicated:
        raise UsageError(f"example id {duplicated[0]!r} occurs {counts[duplicated[0]]} times in "
                         f"the {spec.task} data; ids must be unique (set the id field)")
    return examples


def load_completions(spec: RunSpec,
                     examples: Sequence[Example]) -> List[Tuple[Example, int, str]]:
    """(example, sample, completion) triples of the --completions file.

    Completions of task ids outside `examples` are an error, unless --limit was given (then
    they belong to problems the run leaves out).

    Raises:
      UsageError: unreadable file, unknown task id, no completions, or too few samples for
        a requested pass@k.
    """
    try:
        pairs = humaneval.read_completions(spec.completions)
    except FileNotFoundError:
        raise UsageError(f"--completions file {spec.completions} does not exist") from None
    except (ValueError, OSError) as e:
        raise UsageError(f"cannot read --completions {spec.completions}: "
                         f"{datasources.one_line(e)}") from None
    by_id = {e.id: e for e in examples}
    samples: Dict[str, int] = collections.Counter()
    triples = []
    for task_id, completion in pairs:
        if task_id not in by_id:
            if spec.limit is not None:
                continue
            raise UsageError(f"--completions has task_id {task_id!r}, which is not a "
                             f"{spec.task} problem; check the file or --task")
        triples.append((by_id[task_id], samples[task_id], completion))
        samples[task_id] += 1
    if not triples:
        raise UsageError(f"--completions {spec.completions} has no completion for the "
                         f"problems of this run")
    if spec.pass_at:
        fewest = min(samples.values())
        too_big = [p for p in spec.pass_at if p > fewest]
        if too_big:
            raise UsageError(f"pass@{too_big[0]} needs at least {too_big[0]} completions per "
                             f"problem but some problem has only {fewest}; drop "
                             f"{too_big[0]} from --pass_at")
    return triples


def make_plan(spec: RunSpec, examples: Sequence[Example],
              finished_lines: Sequence[Mapping] = (),
              completions: Optional[Sequence[Tuple[Example, int, str]]] = None) -> RunPlan:
    """The records still to produce, given the lines already in examples.jsonl.

    Args:
      spec: the run's settings.
      examples: the run's examples (`load_examples`).
      finished_lines: lines of examples.jsonl (resume); each key at most once.
      completions: `load_completions`'s result in completions mode.
    """
    finished = {records.key_of(line): line for line in finished_lines}
    resumed: List[dict] = []
    work: List[records.WorkItem] = []
    pending_completions: List[Tuple[records.WorkItem, str]] = []
    total = 0
    if completions is not None:
        num_samples = 0
        for example, sample, completion in completions:
            key = (example.id, sample, records.COMPLETIONS)
            total += 1
            num_samples = max(num_samples, sample + 1)
            if key in finished:
                resumed.append(dict(finished[key]))
            else:
                item = records.WorkItem(example=example, sample=sample,
                                        modes=((records.COMPLETIONS, 0),))
                pending_completions.append((item, completion))
    else:
        num_samples = spec.num_samples
        modes = spec.modes
        for example in examples:
            for sample in range(spec.num_samples):
                missing = []
                for mode, k in modes:
                    total += 1
                    key = (example.id, sample, mode)
                    if key in finished:
                        resumed.append(dict(finished[key]))
                    else:
                        missing.append((mode, k))
                if missing:
                    work.append(records.WorkItem(
                        example=example, sample=sample,
                        modes=None if len(missing) == len(modes) else tuple(missing)))
        if spec.uses_draft and spec.calibrate:
            work.append(records.WorkItem(example=examples[0], sample=0,
                                         kind=records.CALIBRATE))
    return RunPlan(spec=spec, examples=list(examples), work=work,
                   completions=pending_completions, resumed=resumed,
                   num_samples=num_samples, total_records=total)
