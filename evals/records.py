"""The per-example record of an evaluation run: one `examples.jsonl` line per key.

A run evaluates examples x samples x modes. A *mode* is one way of producing the output:

    "autoregressive"       k = 0, the baseline (plain decoding through the same loop)
    "speculative"          k = the run's --k
    "speculative_k{K}"     another K of a --k_sweep (e.g. "speculative_k2")
    "speculative_auto"     k = "auto" (adaptive draft length) in a sweep whose --k is a number
    "completions"          existing completions scored with --completions (no model)

A record's key is (id, sample, mode); `examples.jsonl` holds each key at most once. The
line's fields, in this order, are the contract of docs/design.md section 6 followed by the
prompt text (so a reader sees what the model was given; lines written before it was added
lack it) and extras the summary needs when a run is resumed from the file alone:

    id, sample, mode, prompt_sha256, output, num_tokens, time_s, rounds, accepted, quality,
    prompt, k, batch_size, drafted, verified, beta_sum, accepted_per_position

`time_s` (the wall time of the generate call that produced the row) is the only field that
depends on the machine's timing; every other field is a function of (seed, example, sample,
mode, models) and is identical whichever worker, process or retry produced it
(`deterministic_view`). Per-row random streams are keyed by `row_key(id, sample)`, so a row
reproduces whatever batch a retried bundle puts it in, and the baseline and speculative modes
of one sample share their random stream.
"""

import dataclasses
import hashlib
import json
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from evals.example import Example

AUTOREGRESSIVE = "autoregressive"
SPECULATIVE = "speculative"
COMPLETIONS = "completions"
# The draft length of adaptive mode, `tfspec.generate(k="auto")`.
AUTO = "auto"

DraftLength = Union[int, str]  # an int >= 0, or AUTO

# docs/design.md section 6, in order.
CONTRACT_FIELDS = ("id", "sample", "mode", "prompt_sha256", "output", "num_tokens", "time_s",
                   "rounds", "accepted", "quality")
# The prompt text as the model saw it (beside its hash, for readers of the file), then the
# counters kept so that summaries can be rebuilt from examples.jsonl alone (--resume).
EXTRA_FIELDS = ("prompt", "k", "batch_size", "drafted", "verified", "beta_sum",
                "accepted_per_position")
FIELDS = CONTRACT_FIELDS + EXTRA_FIELDS
# Counters the acceptance statistics of a resumed run need when a line has `rounds`.
ACCEPTANCE_FIELDS = ("drafted", "verified", "beta_sum", "accepted_per_position")
# Fields that depend on timing; all others are deterministic.
TIMING_FIELDS = ("time_s",)

Key = Tuple[str, int, str]


def draft_length(value: Any) -> DraftLength:
    """A mode's k as stored: AUTO, or an int."""
    return AUTO if isinstance(value, str) and value.strip().lower() == AUTO else int(value)


def speculates(k: DraftLength) -> bool:
    """Whether draft length `k` uses the draft (AUTO or k > 0)."""
    return k == AUTO or int(k) > 0


def k_order(k: DraftLength) -> tuple:
    """Sort key of draft lengths: the integers ascending, then AUTO."""
    return (1, 0) if k == AUTO else (0, int(k))


def mode_name(k: DraftLength, main_k: Optional[DraftLength]) -> str:
    """The mode of draft length `k` in a run whose --k is `main_k`."""
    if k == main_k and k != 0:
        return SPECULATIVE
    if k == AUTO:
        return f"{SPECULATIVE}_{AUTO}"
    if k == 0:
        return AUTOREGRESSIVE
    return f"{SPECULATIVE}_k{k}"


def key_of(line: Mapping[str, Any]) -> Key:
    """(id, sample, mode) of a record."""
    return (str(line["id"]), int(line["sample"]), str(line["mode"]))


def row_key(example_id: str, sample: int) -> int:
    """Stable non-negative int63 key of (example id, sample): the row's random stream."""
    digest = hashlib.sha256(f"{example_id}\x00{int(sample)}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def prompt_sha256(prompt: str) -> str:
    """Hex SHA-256 of the prompt text as fed to the tokenizer."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def make_line(generation: Mapping[str, Any], output: str, quality: Mapping[str, Any]) -> dict:
    """The examples.jsonl line of a generation record (see `pipelines.generation`).

    Args:
      generation: a record with the fields of FIELDS except `output` and `quality`
        (missing counters, as in completions mode, become None).
      output: the post-processed output that was scored.
      quality: the per-sample quality dict of the task.
    """
    line = {}
    for field in FIELDS:
        if field == "output":
            line[field] = output
        elif field == "quality":
            line[field] = dict(quality)
        else:
            line[field] = generation.get(field)
    return line


def text_problem(text: Any) -> Optional[str]:
    """Why `text` cannot be stored as UTF-8 (a lone UTF-16 surrogate), or None if it can."""
    if not isinstance(text, str):
        return f"expected text, got {type(text).__name__}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"the text holds a lone UTF-16 surrogate {text[e.start]!r} at character "
                f"{e.start}, which UTF-8 cannot encode")
    return None


def safe_text(text: str) -> str:
    """`text` with lone surrogates written as backslash escapes (e.g. "\\ud800").

    Beam's string coder and the journal encode text as UTF-8, which a lone surrogate (from a
    completions file or a candidate's exception message) cannot be; one such sample would
    otherwise fail the whole run.
    """
    if text_problem(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def sanitize(value: Any) -> Any:
    """`value` (dicts, lists, tuples of JSON values) with every string made `safe_text`."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {sanitize(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(sanitize(v) for v in value)
    return value


def line_problem(line: Any) -> Optional[str]:
    """Why a journal line cannot be reused as a finished record, or None.

    A resumed run aggregates finished lines without regenerating them, so each needs the
    contract fields (DESIGN section 6) with values of the right type, and, when it has
    counters (`rounds`), the counters the acceptance statistics add up.
    """
    if not isinstance(line, dict):
        return "not a JSON object"
    needed = CONTRACT_FIELDS + (ACCEPTANCE_FIELDS if line.get("rounds") is not None else ())
    missing = [f for f in needed if f not in line]
    if missing:
        return f"missing fields {', '.join(missing)}"
    try:
        key_of(line)
    except (TypeError, ValueError):
        return "id, sample or mode of the wrong type"
    if not isinstance(line["output"], str):
        return "output is not a string"
    if not isinstance(line["quality"], dict):
        return "quality is not an object"
    for name in ("num_tokens", "rounds", "accepted", "drafted", "verified", "batch_size", "k"):
        value = line.get(name)
        if name == "k" and value == AUTO:
            continue
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{name} is not an integer" + (' or "auto"' if name == "k" else "")
    for name in ("time_s", "beta_sum"):
        value = line.get(name)
        if value is not None and (not isinstance(value, (int, float))
                                  or isinstance(value, bool)):
            return f"{name} is not a number"
    if line["time_s"] is not None and line["num_tokens"] is None:
        return "time_s without num_tokens"
    per_position = line.get("accepted_per_position")
    if per_position is not None and not (isinstance(per_position, list) and all(
            isinstance(x, int) for x in per_position)):
        return "accepted_per_position is not a list of integers"
    return None


def dumps(line: Mapping[str, Any]) -> str:
    """One JSON line (with the trailing newline), non-ASCII kept as UTF-8."""
    return json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n"


def deterministic_view(line: Mapping[str, Any]) -> str:
    """The line without timing fields, as canonical JSON (sorted keys): equal for equal runs."""
    return json.dumps({k: v for k, v in line.items() if k not in TIMING_FIELDS},
                      sort_keys=True, ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """One (example, sample) to generate, or the calibration request of a run.

    Attributes:
      example: the task example (its prompt is what the model sees).
      sample: sample number in [0, num_samples).
      modes: the (mode, k) pairs still to produce for this key; None means all modes of the
        run (the inference args). A resumed run passes only the missing ones.
      kind: "generate", or "calibrate" for the one item that measures the draft cost ratio.
    """

    example: Example
    sample: int
    modes: Optional[Tuple[Tuple[str, int], ...]] = None
    kind: str = "generate"

    @property
    def id(self) -> str:
        return self.example.id

    @property
    def row_key(self) -> int:
        return row_key(self.example.id, self.sample)


GENERATE = "generate"
CALIBRATE = "calibrate"


def mode_list(ks: Sequence[DraftLength], main_k: Optional[DraftLength]
              ) -> Tuple[Tuple[str, DraftLength], ...]:
    """((mode, k), ...) for the draft lengths of a run, in the given order."""
    return tuple((mode_name(draft_length(k), main_k), draft_length(k)) for k in ks)
