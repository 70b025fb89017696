"""Tiny random T5 target/draft pairs and small data files for the pipeline and CLI tests."""

import json
import os

TINY = dict(d_model=16, d_kv=4, d_ff=24, num_layers=1, num_heads=2)
# Every document's prompt falls in one prompt bucket (64) of the test tokenizer, so a run
# over them compiles one loop per mode, not two (each compile costs seconds of a subprocess).
XSUM_DOCS = (
    "The cat sat on the mat. It was very warm.",
    "Rain is expected tomorrow in the north.",
    "The team won the final after extra time.",
    "A new bridge opened over the river today.",
    "Prices rose again this month, figures show.",
    "The city museum will reopen next spring.",
)


def make_pair(directory: str, draft_vocab_size=None) -> dict:
    """Writes a test tokenizer and a random target/draft pair sharing its vocabulary.

    Args:
      directory: where `tok/`, `target/`, `draft/` are created.
      draft_vocab_size: give the draft another vocabulary size (for mismatch tests).

    Returns:
      {"target": dir, "draft": dir, "tokenizer": spiece.model path, "vocab_size": int}.
    """
    import tfspec  # pylint: disable=import-outside-toplevel
    from recipes.tiny_code import tokenizer_training  # pylint: disable=import-outside-toplevel
    from tfspec.models import T5  # pylint: disable=import-outside-toplevel
    from tfspec.models import T5Config  # pylint: disable=import-outside-toplevel

    tok = tokenizer_training.make_test_tokenizer(os.path.join(directory, "tok"))
    paths = {"tokenizer": tok.path, "vocab_size": tok.vocab_size}
    for name, seed, vocab in (("target", 0, tok.vocab_size),
                              ("draft", 1, draft_vocab_size or tok.vocab_size)):
        model = T5(T5Config(vocab_size=vocab, **TINY), seed=seed)
        model.tokenizer_path = tok.path
        paths[name] = tfspec.save_model(model, os.path.join(directory, name))
    return paths


def make_feature_draft(directory: str, target_dir: str, seed: int = 2, **overrides) -> str:
    """Saves a random `tfspec.models.FeatureDraft` for the target saved in `target_dir` and
    returns its directory (a --draft spec).

    Args:
      directory: where to save it.
      target_dir: the target's checkpoint (from `make_pair`).
      seed: its initialisation seed.
      overrides: `FeatureDraftConfig` fields; e.g. `FOREIGN` makes a draft "trained for
        another target", which refuses this one in one line.
    """
    import tfspec  # pylint: disable=import-outside-toplevel
    from tfspec.models import FeatureDraft, FeatureDraftConfig  # pylint: disable=import-outside-toplevel

    target = tfspec.load_model(target_dir)
    config = FeatureDraftConfig.for_target(target, **{"d_ff": TINY["d_ff"], **overrides})
    return tfspec.save_model(FeatureDraft(config, seed=seed), directory)


# A fingerprint no target has (see `make_feature_draft`).
FOREIGN = dict(target_fingerprint="0123456789abcdef", target_name="zoo:some-other-target")


def write_xsum(path: str, count: int = len(XSUM_DOCS)) -> str:
    """A local XSum-format JSONL file (fields id, document, summary)."""
    with open(path, "w", encoding="utf-8") as f:
        for i, doc in enumerate(XSUM_DOCS[:count]):
            f.write(json.dumps({"id": f"doc{i}", "document": doc,
                                "summary": doc.split(".")[0] + "."}) + "\n")
    return path


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
