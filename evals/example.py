"""One evaluation example, the unit every task loads and the pipeline carries."""

import dataclasses
from typing import Any, Iterable, Mapping, Optional


@dataclasses.dataclass(frozen=True)
class Example:
    """An example of a task.

    Attributes:
      id: Stable identifier, unique within the task and split (HumanEval: `task_id`).
      source: The raw input text (a document, an English sentence, a code snippet, a
        HumanEval prompt), before the task's prompt formatting.
      prompt: The text fed to the model: `task.format_prompt(example)` of the source.
      reference: The reference output (summary, translation, canonical solution).
      record: The raw record as loaded, for task-specific fields (HumanEval: `test`,
        `entry_point`).
    """

    id: str
    source: str
    prompt: str
    reference: str
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False,
                                                  repr=False)


def from_records(records: Iterable[Mapping[str, Any]], *, input_field: str, target_field: str,
                 id_field: Optional[str], prefix: str, id_prefix: str) -> list:
    """Examples of a text-to-text task from loaded records.

    Args:
      records: Dicts as read by `evals.datasources`.
      input_field: Field of the model input (dots reach into nested dicts).
      target_field: Field of the reference output.
      id_field: Field of the example id; when None or missing in a record, the id is
        `f"{id_prefix}{index}"`.
      prefix: Task prefix prepended to the input to form the prompt ("summarize: ").
      id_prefix: Prefix of generated ids.
    """
    from evals import datasources  # pylint: disable=import-outside-toplevel

    examples = []
    for index, record in enumerate(records):
        source = datasources.text_field(record, input_field)
        reference = datasources.text_field(record, target_field)
        if id_field and _has_field(record, id_field):
            example_id = str(datasources.get_field(record, id_field))
        else:
            example_id = f"{id_prefix}{index}"
        examples.append(Example(id=example_id, source=source, prompt=prefix + source,
                                reference=reference, record=dict(record)))
    return examples


def _has_field(record, field):
    value = record
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False
        value = value[part]
    return True
