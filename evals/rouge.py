"""ROUGE-1/2/L/Lsum F-measures with a seeded bootstrap confidence interval.

Per-example scores come from Google's `rouge_score` package (`use_stemmer=True`).
ROUGE-Lsum is the summary-level LCS over newline-separated sentences: texts that have no
newline are split into sentences first (`split_sentences`), so single-line model output is
scored per sentence too. The corpus score of each type is the mean per-example F-measure,
x100; `_low`/`_high` are percentile bounds of the mean over bootstrap resamples of the
examples. `rouge_score.scoring.BootstrapAggregator` draws from numpy's global random state
and cannot be seeded locally, so the bootstrap here is our own, driven by
`numpy.random.default_rng(seed)`.
"""

import functools
import re
from typing import Mapping, Sequence

import numpy as np

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def metric_names() -> tuple:
    """Keys of `aggregate`'s result: each type, then its `_low` and `_high` bounds."""
    return tuple(f"{t}{s}" for t in ROUGE_TYPES for s in ("", "_low", "_high"))


def split_sentences(text: str) -> str:
    """One sentence per line: keeps existing line breaks, else splits after . ! or ?."""
    if "\n" in text:
        lines = text.split("\n")
    else:
        lines = _SENTENCE_END.split(text)
    return "\n".join(line.strip() for line in lines if line.strip())


@functools.lru_cache(maxsize=None)
def _scorer():
    from rouge_score import rouge_scorer  # pylint: disable=import-outside-toplevel
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def score(prediction: str, reference: str) -> dict:
    """ROUGE F-measures x100 of one prediction against one reference."""
    scores = _scorer().score(split_sentences(reference), split_sentences(prediction))
    return {t: 100.0 * scores[t].fmeasure for t in ROUGE_TYPES}


def score_pairs(predictions: Sequence[str], references: Sequence[str]) -> list:
    """Per-example ROUGE F-measures x100."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    return [score(p, r) for p, r in zip(predictions, references)]


def bootstrap_interval(values: Sequence[float], num_samples: int = 1000,
                       confidence: float = 0.95, seed: int = 0) -> tuple:
    """(mean, low, high) of `values`, bounds from a seeded percentile bootstrap of the mean.

    Args:
      values: One number per example.
      num_samples: Number of bootstrap resamples.
      confidence: Width of the interval (0.95: 2.5th and 97.5th percentiles).
      seed: Seed of the resampling; same seed, same bounds.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("bootstrap_interval needs a non-empty 1-D sequence")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    rng = np.random.default_rng(seed)
    means = np.empty(num_samples)
    chunk = max(1, (1 << 22) // x.size)  # Bounds memory of the index matrix to ~32 MiB.
    for start in range(0, num_samples, chunk):
        stop = min(num_samples, start + chunk)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        means[start:stop] = x[idx].mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(x.mean()), float(low), float(high)


def aggregate(per_example: Sequence[Mapping[str, float]], num_samples: int = 1000,
              confidence: float = 0.95, seed: int = 0) -> dict:
    """Corpus ROUGE (mean F x100) with bootstrap bounds from per-example scores."""
    if not per_example:
        raise ValueError("no examples to aggregate")
    result = {}
    for t in ROUGE_TYPES:
        mean, low, high = bootstrap_interval([s[t] for s in per_example], num_samples,
                                             confidence, seed)
        result.update({t: mean, f"{t}_low": low, f"{t}_high": high})
    return result


def compute(predictions: Sequence[str], references: Sequence[str], num_samples: int = 1000,
            confidence: float = 0.95, seed: int = 0) -> dict:
    """Corpus ROUGE of predictions against references; see `aggregate`."""
    return aggregate(score_pairs(predictions, references), num_samples, confidence, seed)
