"""Target/draft specs and prompts shared by the benchmarks.

A SPEC is anything `tfspec.load_model` takes (a checkpoint directory, "zoo:NAME",
"hf://ORG/NAME", a keras-hub preset name), or

    random:PRESET                   a random-weight T5 of a `T5Config.preset` shape
    random:PRESET:key=val,key=val   the same with `T5Config` fields overridden, e.g.
                                    random:t5-small:d_model=32,num_layers=1,vocab_size=64
                                    (num_layers sets num_decoder_layers too unless given)
    ngram:unigram                   (draft only) a random unigram NGram over the target's
                                    vocabulary: a near-free draft with low acceptance

Random models get random-token prompts; checkpoints get held-out code prompts (the validation
split of `tfspec.data.code_corpus`) tokenized with the checkpoint's tokenizer.
"""

from typing import List, Optional

import numpy as np

import tfspec

DEFAULT_TARGET = "zoo:tiny-code-target"
DEFAULT_DRAFT = "zoo:tiny-code-draft"


def is_random(spec: str) -> bool:
    """True for specs whose weights are random (prompts are then random tokens)."""
    return str(spec).startswith(("random:", "ngram:"))


def parse_random_config(spec: str) -> tfspec.models.T5Config:
    """The `T5Config` of a "random:PRESET[:key=val,...]" spec."""
    parts = spec.split(":", 2)
    if len(parts) < 2 or parts[0] != "random" or not parts[1]:
        raise ValueError(f"expected random:PRESET[:key=val,...], got {spec!r}")
    config = tfspec.models.T5Config.preset(parts[1])
    if len(parts) == 3 and parts[2]:
        overrides = {}
        for item in parts[2].split(","):
            key, _, value = item.partition("=")
            if not _:
                raise ValueError(f"bad override {item!r} in {spec!r} (want key=val)")
            overrides[key.strip()] = _parse_value(value.strip())
        if "num_layers" in overrides and "num_decoder_layers" not in overrides:
            # Presets spell num_decoder_layers out; "num_layers=N" means N of each.
            overrides["num_decoder_layers"] = overrides["num_layers"]
        config = config.replace(**overrides)
    return config


def _parse_value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def load(spec: str, dtype: Optional[str] = None, seed: int = 0, vocab_size: int = 0):
    """Loads one model from a SPEC (see the module docstring).

    Args:
      spec: the SPEC string.
      dtype: "float32" or "bfloat16" (None: the checkpoint's / float32).
      seed: initialisation seed of random models (use different seeds for target and draft).
      vocab_size: vocabulary of an "ngram:unigram" draft (the target's).
    """
    spec = str(spec)
    if spec.startswith("random:"):
        return tfspec.models.T5(parse_random_config(spec), seed=seed, dtype=dtype or "float32")
    if spec.startswith("ngram:"):
        if spec != "ngram:unigram" or vocab_size < 1:
            raise ValueError(f"only ngram:unigram (with the target's vocab) is supported, got "
                             f"{spec!r}")
        rng = np.random.RandomState(seed)
        unigram = rng.dirichlet(np.ones(vocab_size)).astype(np.float32)
        return tfspec.models.NGram(np.log(unigram))
    return tfspec.load_model(spec, dtype=dtype)


def load_pair(target_spec: str, draft_spec: str, dtype: Optional[str] = None):
    """(target, draft); random targets and drafts get different seeds."""
    target = load(target_spec, dtype=dtype, seed=0)
    draft = load(draft_spec, dtype=dtype, seed=1, vocab_size=target.vocab_size)
    return target, draft


def prompts(target_spec: str, target, num_prompts: int, prompt_length: int = 16,
            seed: int = 0) -> List[List[int]]:
    """`num_prompts` prompts (token-id lists) for `target`.

    Random targets: random ids in [3, vocab) of length `prompt_length` (ids 0-2 are pad, EOS,
    UNK). Checkpoints: the first `num_prompts` held-out code-completion prompts, tokenized
    with the checkpoint's tokenizer and cut to the model's `max_prompt_length` if it has one.
    """
    if is_random(target_spec):
        rng = np.random.RandomState(seed)
        return [rng.randint(3, target.vocab_size, size=prompt_length).tolist()
                for _ in range(num_prompts)]
    from tfspec.data import code_corpus  # Deferred: mining the corpus is only needed here.
    tokenizer = tfspec.load_tokenizer(getattr(target, "tokenizer_path", None) or target_spec)
    items = code_corpus.build_corpus().completion("validation")[:num_prompts]
    limit = getattr(target, "max_prompt_length", None)
    out = []
    for item in items:
        ids = list(tokenizer.encode(item["prompt"]))
        out.append(ids[-limit:] if limit else ids)  # Keep the end: the code to continue.
    return out


def batches_of(pool: List[List[int]], batch_size: int) -> List[List[List[int]]]:
    """Consecutive batches of `batch_size` prompts covering `pool` once (the last one, and a
    batch larger than the pool, filled by cycling), so every batch size sees every prompt."""
    count = max(1, -(-len(pool) // batch_size))
    return [[pool[(b * batch_size + i) % len(pool)] for i in range(batch_size)]
            for b in range(count)]
