"""BLEU with sacrebleu (corpus BLEU, default 13a tokenization, one reference per segment)."""

from typing import Sequence


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU as `{"bleu": score}` (0-100); `signature()` names the configuration.

    Args:
      hypotheses: One detokenized system output per segment.
      references: One detokenized reference per segment, aligned with `hypotheses`.
    """
    import sacrebleu  # pylint: disable=import-outside-toplevel

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no segments to score")
    metric = sacrebleu.metrics.BLEU()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": float(result.score)}


def signature() -> str:
    """sacrebleu's signature of the BLEU configuration used, for reports."""
    import sacrebleu  # pylint: disable=import-outside-toplevel

    metric = sacrebleu.metrics.BLEU()
    metric.corpus_score(["a"], [["a"]])  # The signature needs the number of references.
    return str(metric.get_signature())


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """Smoothed sentence BLEU (sacrebleu defaults): a per-example diagnostic, not the metric."""
    import sacrebleu  # pylint: disable=import-outside-toplevel

    return float(sacrebleu.sentence_bleu(hypothesis, [reference]).score)
