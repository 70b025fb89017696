"""Multitask tokenized examples and fixed-shape batches for training T5 on the code corpus.

Two tasks, both from a code corpus (e.g. `recipes.tiny_code.corpus`):

- **completion**: encoder input = the prompt text *as is* (imports + signature + docstring,
  exactly what HumanEval feeds at evaluation time, so no task prefix); target = the body + EOS.
- **docsum**: encoder input = `"summarize: " + code`; target = the one-line summary + EOS.

Length caps. An encoder input longer than `max_encoder_length` keeps its *end* for the
completion task (the signature and docstring that the body continues sit at the end of the
prompt; leading imports go first) and its *start* for docsum (the signature and the first
lines). A target longer than `max_target_length` is cut and gets no EOS, so the model never
learns to stop at an arbitrary cut.

Batching. Each example goes to the smallest bucket `(S, T)` of `encoder_buckets` x
`target_buckets` that holds it, and every batch of bucket `(S, T)` has the same number of
rows `B = max(1, batch_tokens // (S + T))` (the last, partial batch of a bucket is filled
with empty rows whose mask is all False). So a `tf.function` train step traces once per
bucket, at most `len(encoder_buckets) * len(target_buckets)` times, and a batch holds about
`batch_tokens` padded tokens whatever its bucket. Worked example (tokens as ids, EOS = 1,
pad = 0, decoder start = 0), one row of bucket (S=8, T=4) with encoder ids [5, 6, 7] and
target [9, 9, 1]:

    encoder_ids        [5 6 7 0 0 0 0 0]     encoder_lengths  3
    decoder_input_ids  [0 9 9 1]             (start id, then the target shifted right)
    target_ids         [9 9 1 0]
    loss_mask          [T T T F]

The order of batches in epoch `e` is a pure function of `(seed, e)`, so a data position is
just `(epoch, index)`: the trainer checkpoints those two integers and a resumed run sees the
very same batches an uninterrupted run would have seen.
"""

import dataclasses
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from tfspec.models import target_binding

COMPLETION = "completion"
DOCSUM = "docsum"
TASKS = (COMPLETION, DOCSUM)

# Encoder-input prefix of each task. Completion has none: the evaluation harness feeds
# HumanEval prompts as they are.
TASK_PREFIXES = {COMPLETION: "", DOCSUM: "summarize: "}
# Which end of an over-long encoder input is kept.
KEEP_END = {COMPLETION: True, DOCSUM: False}


@dataclasses.dataclass(frozen=True)
class Example:
    """One tokenized example.

    Attributes:
      id: corpus id, prefixed by the task (e.g. "docsum:json.dumps").
      task: "completion" or "docsum".
      encoder_ids: int32 [S_i] encoder input (task prefix included), 1 <= S_i <= the cap.
      target_ids: int32 [T_i] decoder target, ending with EOS unless it was truncated.
    """

    id: str
    task: str
    encoder_ids: np.ndarray
    target_ids: np.ndarray


class Batch(NamedTuple):
    """A padded batch of one bucket shape (numpy; converted to tensors by the trainer).

    Attributes:
      encoder_ids: int32 [B, S], left-aligned, padded with the pad id.
      encoder_lengths: int32 [B], valid encoder tokens per row (>= 1; 1 for empty filler rows).
      decoder_input_ids: int32 [B, T], the decoder start id then `target_ids` shifted right.
      target_ids: int32 [B, T], padded with the pad id.
      loss_mask: bool [B, T], True at real target tokens.
    """

    encoder_ids: np.ndarray
    encoder_lengths: np.ndarray
    decoder_input_ids: np.ndarray
    target_ids: np.ndarray
    loss_mask: np.ndarray


def encoder_text(task: str, record: Dict[str, str]) -> str:
    """The encoder input text of a corpus record: the prompt as is, or prefix + code."""
    if task == COMPLETION:
        return TASK_PREFIXES[COMPLETION] + record["prompt"]
    if task == DOCSUM:
        return TASK_PREFIXES[DOCSUM] + record["code"]
    raise ValueError(f"Unknown task {task!r}; tasks: {', '.join(TASKS)}.")


def target_text(task: str, record: Dict[str, str]) -> str:
    """The decoder target text of a corpus record (EOS is added by `make_example`)."""
    if task == COMPLETION:
        return record["completion"]
    if task == DOCSUM:
        return record["summary"]
    raise ValueError(f"Unknown task {task!r}; tasks: {', '.join(TASKS)}.")


def make_example(task: str, record: Dict[str, str], tokenizer, max_encoder_length: int,
                 max_target_length: int) -> Example:
    """Tokenizes one corpus record (see the module docstring for the caps).

    Args:
      task: "completion" or "docsum".
      record: a corpus dict (`id, prompt, completion` or `id, code, summary`).
      tokenizer: a `tfspec.Tokenizer` (`encode(text)` without EOS, `eos_id`).
      max_encoder_length: encoder tokens kept at most.
      max_target_length: target tokens kept at most, EOS included.

    Returns:
      An `Example`.
    """
    encoder_ids = list(tokenizer.encode(encoder_text(task, record)))
    if len(encoder_ids) > max_encoder_length:
        if KEEP_END[task]:
            encoder_ids = encoder_ids[len(encoder_ids) - max_encoder_length:]
        else:
            encoder_ids = encoder_ids[:max_encoder_length]
    if not encoder_ids:
        encoder_ids = [tokenizer.eos_id]  # Never empty: T5 needs one valid encoder token.
    target_ids = (list(tokenizer.encode(target_text(task, record))) +
                  [tokenizer.eos_id])[:max_target_length]
    return Example(id=f"{task}:{record['id']}", task=task,
                   encoder_ids=np.asarray(encoder_ids, np.int32),
                   target_ids=np.asarray(target_ids, np.int32))


def make_examples(corpus, tokenizer, split: str, tasks: Sequence[str] = TASKS,
                  max_encoder_length: int = 512, max_target_length: int = 256,
                  limit: Optional[int] = None) -> List[Example]:
    """Tokenizes a split of a `CodeCorpus` for the given tasks.

    Args:
      corpus: a `recipes.tiny_code.corpus.CodeCorpus` (or anything with `completion(split)`
        and `docsum(split)` returning lists of dicts).
      tokenizer: a `tfspec.Tokenizer`.
      split: "train" or "validation".
      tasks: task names to include, in this order.
      max_encoder_length, max_target_length: caps (see `make_example`).
      limit: keep only the first `limit` records of each task (tests, smoke runs).

    Returns:
      A list of `Example`s, tasks concatenated in order, records in corpus order.
    """
    examples = []
    for task in tasks:
        if task not in TASKS:
            raise ValueError(f"Unknown task {task!r}; tasks: {', '.join(TASKS)}.")
        records = corpus.completion(split) if task == COMPLETION else corpus.docsum(split)
        if limit is not None:
            records = records[:limit]
        examples.extend(make_example(task, r, tokenizer, max_encoder_length, max_target_length)
                        for r in records)
    return examples


def _bucket_of(length: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if length <= b:
            return b
    raise ValueError(f"Length {length} exceeds the largest bucket {buckets[-1]}.")


def pad_batch(examples: Sequence[Example], rows: int, encoder_width: int, target_width: int,
              pad_id: int = 0, decoder_start_id: int = 0) -> Batch:
    """Pads examples into one `Batch` of shape [rows, encoder_width] / [rows, target_width].

    Rows past `len(examples)` are filler: encoder length 1 (a single pad token) and an
    all-False loss mask, so they contribute nothing to the loss.
    """
    if len(examples) > rows:
        raise ValueError(f"{len(examples)} examples do not fit in {rows} rows.")
    encoder_ids = np.full([rows, encoder_width], pad_id, np.int32)
    encoder_lengths = np.ones([rows], np.int32)
    target_ids = np.full([rows, target_width], pad_id, np.int32)
    loss_mask = np.zeros([rows, target_width], bool)
    for i, ex in enumerate(examples):
        s, t = len(ex.encoder_ids), len(ex.target_ids)
        if s > encoder_width or t > target_width:
            raise ValueError(f"Example {ex.id} ({s}, {t}) does not fit ({encoder_width}, "
                             f"{target_width}).")
        encoder_ids[i, :s] = ex.encoder_ids
        encoder_lengths[i] = s
        target_ids[i, :t] = ex.target_ids
        loss_mask[i, :t] = True
    decoder_input_ids = np.concatenate(
        [np.full([rows, 1], decoder_start_id, np.int32), target_ids[:, :-1]], axis=1)
    return Batch(encoder_ids, encoder_lengths, decoder_input_ids, target_ids, loss_mask)


class BucketedBatches:
    """Epochs of fixed-shape, token-budgeted batches in a seeded order.

    Args:
      examples: the `Example`s.
      batch_tokens: padded tokens per batch, `B * (S + T)` (B is rounded down, at least 1).
      encoder_buckets: increasing encoder widths S; the last must hold the longest input.
      target_buckets: increasing target widths T; the last must hold the longest target.
      seed: seeds the order; epoch `e` uses `(seed, e)`.
      shuffle: False keeps a fixed order (validation).
      pad_id, decoder_start_id: T5's 0 and 0 by default.
    """

    def __init__(self, examples: Sequence[Example], batch_tokens: int,
                 encoder_buckets: Sequence[int], target_buckets: Sequence[int], seed: int = 0,
                 shuffle: bool = True, pad_id: int = 0, decoder_start_id: int = 0):
        if not examples:
            raise ValueError("BucketedBatches needs at least one example.")
        self.encoder_buckets = tuple(sorted(int(b) for b in encoder_buckets))
        self.target_buckets = tuple(sorted(int(b) for b in target_buckets))
        self.batch_tokens = int(batch_tokens)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.pad_id = pad_id
        self.decoder_start_id = decoder_start_id
        self.examples = list(examples)
        groups: Dict[Tuple[int, int], List[int]] = {}
        for i, ex in enumerate(self.examples):
            key = (_bucket_of(len(ex.encoder_ids), self.encoder_buckets),
                   _bucket_of(len(ex.target_ids), self.target_buckets))
            groups.setdefault(key, []).append(i)
        self._groups = dict(sorted(groups.items()))

    def rows(self, shape: Tuple[int, int]) -> int:
        """Rows B of every batch of bucket `shape` = (S, T)."""
        return max(1, self.batch_tokens // (shape[0] + shape[1]))

    @property
    def shapes(self) -> List[Tuple[int, int, int]]:
        """The (B, S, T) batch shapes that occur (what a train step traces)."""
        return [(self.rows(s),) + s for s in self._groups]

    def epoch_plan(self, epoch: int) -> List[Tuple[Tuple[int, int], List[int]]]:
        """The batches of an epoch as (bucket shape, example indices), in order."""
        rng = np.random.default_rng([self.seed, int(epoch)]) if self.shuffle else None
        plan = []
        for shape, members in self._groups.items():
            members = list(members)
            if rng is not None:
                rng.shuffle(members)
            rows = self.rows(shape)
            plan.extend((shape, members[i:i + rows]) for i in range(0, len(members), rows))
        if rng is not None:
            order = rng.permutation(len(plan))
            plan = [plan[i] for i in order]
        return plan

    def __len__(self) -> int:
        """Batches per epoch."""
        return sum(-(-len(m) // self.rows(s)) for s, m in self._groups.items())

    def batch(self, shape: Tuple[int, int], indices: Sequence[int]) -> Batch:
        return pad_batch([self.examples[i] for i in indices], self.rows(shape), shape[0],
                         shape[1], self.pad_id, self.decoder_start_id)

    def iterate(self, epoch: int = 0, position: int = 0) -> Iterator[Tuple[int, int, Batch]]:
        """Yields `(epoch, position, batch)` forever, starting at batch `position` of `epoch`.

        `position` is the index of the yielded batch within its epoch; the next batch to
        train on after it is `(epoch, position + 1)` (or `(epoch + 1, 0)` at the end).
        """
        while True:
            plan = self.epoch_plan(epoch)
            for i in range(position, len(plan)):
                yield epoch, i, self.batch(*plan[i])
            epoch, position = epoch + 1, 0

    def one_epoch(self) -> Iterator[Batch]:
        """The batches of epoch 0 once (validation)."""
        for shape, indices in self.epoch_plan(0):
            yield self.batch(shape, indices)


def token_counts(examples: Sequence[Example]) -> Dict[str, int]:
    """Numbers of examples, encoder tokens and target tokens (for logs and model cards)."""
    return {"examples": len(examples),
            "encoder_tokens": int(sum(len(e.encoder_ids) for e in examples)),
            "target_tokens": int(sum(len(e.target_ids) for e in examples))}


def frequent_target_tokens(examples: Sequence[Example], vocab_size: int, size: int,
                           always: Sequence[int] = ()) -> np.ndarray:
    """The `size` most frequent token ids of `examples`' target sequences (ties: lower id),
    `always` (e.g. EOS) included: a draft vocabulary, int32 [size] sorted."""
    counts = np.zeros([vocab_size], np.int64)
    for e in examples:
        np.add.at(counts, e.target_ids, 1)
    return target_binding.draft_vocabulary(counts, size, always=always)
