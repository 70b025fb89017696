"""Target/draft specs and prompts shared by the benchmarks.

A SPEC is anything `tfspec.load_model` takes (a checkpoint directory, "zoo:NAME",
"hf://ORG/NAME", a keras-hub preset name), or

    random:PRESET                   a random-weight T5 of a `T5Config.preset` shape
    random:PRESET:key=val,key=val   the same with `T5Config` fields overridden, e.g.
                                    random:t5-small:d_model=32,num_layers=1,vocab_size=64
                                    (num_layers sets num_decoder_layers too unless given)
    ngram:unigram                   (draft only) a random unigram NGram over the target's
                                    vocabulary: a near-free draft with low acceptance
    prompt_lookup[:MAX_NGRAM]       (draft only) `tfspec.models.PromptLookup` over the
                                    target's vocabulary (copies what followed the latest
                                    earlier match of the suffix; MAX_NGRAM default 3)

A draft SPEC may also name a feature draft (an EAGLE-style `tfspec.models.FeatureDraft`: a
directory whose config.json has architectures ["T5FeatureDraft"], or its zoo entry, e.g.
"zoo:tiny-code-eagle"). It has no encoder, embedding or LM head of its own: `load_pair` binds
it to the target, which refuses, in one line (`ModelError`), a target it was not trained for;
it stays float32 whatever --dtype says; and it cannot decode alone, so the draft-alone timing
of c decodes `draft_alone(draft, target)` (`FeatureDraft.alone()`: the target's encoder, then
the draft fed its own predicted features).

A SPEC that cannot be loaded, or a draft that cannot serve the target, raises `ModelError`
(one line naming the flag); `exit_on_input_error` turns it into exit status 2.

Random models get random-token prompts; checkpoints get held-out code prompts (the validation
split of `recipes.tiny_code.corpus`) tokenized with the checkpoint's tokenizer.

--prompts FILE replaces the built-in pool with your own prompts: a JSONL file, one
{"prompt": "text"} object per line (other keys ignored, blank lines skipped), tokenized with
the target's tokenizer and cut to the model's `max_prompt_length` (keeping the end), as the
built-in pool is (`prompts_from_file`). Bad input raises `PromptsError`, a one-line message
naming the file and line; the benchmarks' `main`s turn it into exit status 2
(`exit_on_input_error`, also spelled `exit_on_prompts_error`).
"""

import contextlib
import json
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np

import tfspec
from tfspec import decoding

DEFAULT_TARGET = "zoo:tiny-code-target"
DEFAULT_DRAFT = "zoo:tiny-code-draft"
DEFAULT_FEATURE_DRAFT = "zoo:tiny-code-eagle"
PROMPT_LOOKUP = "prompt_lookup"
DEFAULT_PROMPT_LOOKUP_NGRAM = 3


class ModelError(ValueError):
    """A --target/--draft SPEC that cannot be loaded, or a draft that cannot serve the
    target (e.g. a feature draft trained for another target); the message is one line."""


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
      vocab_size: vocabulary of an "ngram:unigram" or "prompt_lookup" draft (the target's).
    """
    spec = str(spec)
    if spec == PROMPT_LOOKUP or spec.startswith(PROMPT_LOOKUP + ":"):
        return _prompt_lookup(spec, vocab_size)
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


def _prompt_lookup(spec: str, vocab_size: int):
    _, _, text = spec.partition(":")
    try:
        max_ngram = int(text) if text else DEFAULT_PROMPT_LOOKUP_NGRAM
    except ValueError:
        max_ngram = 0
    if max_ngram < 1 or vocab_size < 1:
        raise ValueError(f"expected {PROMPT_LOOKUP}[:MAX_NGRAM] with MAX_NGRAM >= 1 (and the "
                         f"target's vocab), got {spec!r}")
    return tfspec.models.PromptLookup(max_ngram=max_ngram, vocab_size=vocab_size)


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its type name if it has none)."""
    return " ".join(str(error).split()) or type(error).__name__


def load_spec(spec: str, flag: str, dtype: Optional[str] = None, seed: int = 0,
              vocab_size: int = 0):
    """`load`, with a SPEC that cannot be loaded raised as `ModelError` naming `flag`."""
    try:
        return load(spec, dtype=dtype, seed=seed, vocab_size=vocab_size)
    except (OSError, ValueError, TypeError) as e:
        raise ModelError(f"cannot load {flag} {spec}: {one_line(e)}") from None


def is_feature_draft(model) -> bool:
    """Whether `model` is a feature draft (reads the target's features; cannot decode
    alone: see `draft_alone`)."""
    return decoding.uses_target_features(model)


def bind_draft(target, draft, draft_spec: str = "", target_spec: str = "",
               flag: str = "--draft"):
    """Returns `draft`, bound to `target` if it is a feature draft or reads the target's
    encoder (a T5 draft with a target-encoder adapter).

    Raises:
      ModelError: such a draft that cannot draft for `target` (one line).
    """
    if is_feature_draft(draft) or decoding.reads_target_encoder(draft):
        try:
            draft.bind(target)
        except ValueError as e:
            target_name = f"--target {target_spec}" if target_spec else "the target"
            raise ModelError(f"{flag} {draft_spec or 'feature draft'} cannot draft for "
                             f"{target_name}: {one_line(e)}") from None
    return draft


def draft_alone(draft, target):
    """What the draft-alone timing of c decodes: the draft itself, or for a feature draft
    its `alone()` model bound to `target` (the target's encoder in prepare, then the draft
    fed its own predicted features)."""
    if is_feature_draft(draft):
        return draft.bind(target).alone()
    return draft


def draft_kind(draft) -> str:
    """"medusa", "feature", "t5", "ngram", "prompt_lookup", or the class name of another
    draft."""
    if isinstance(draft, tfspec.models.MedusaHeads):
        return "medusa"
    if is_feature_draft(draft):
        return "feature"
    for kind, cls in (("t5", tfspec.models.T5), ("ngram", tfspec.models.NGram),
                      ("prompt_lookup", tfspec.models.PromptLookup)):
        if isinstance(draft, cls):
            return kind
    return type(draft).__name__


def load_pair(target_spec: str, draft_spec: str, dtype: Optional[str] = None):
    """(target, draft); random targets and drafts get different seeds. A feature draft comes
    back bound to the target.

    Raises:
      ModelError: a SPEC that cannot be loaded, or a feature draft that cannot draft for the
        target (one line).
    """
    target = load_spec(target_spec, "--target", dtype=dtype, seed=0)
    return target, load_draft(target, target_spec, draft_spec, dtype)


def load_draft(target, target_spec: str, draft_spec: str, dtype: Optional[str] = None,
               flag: str = "--draft", seed: int = 1):
    """The draft of `draft_spec` for `target`, checked (vocabulary) and, for a feature
    draft, bound to it.

    Raises:
      ModelError: see `load_pair`.
    """
    draft = load_spec(draft_spec, flag, dtype=dtype, seed=seed, vocab_size=target.vocab_size)
    if draft.vocab_size != target.vocab_size:
        raise ModelError(f"target and draft must share the vocabulary: --target {target_spec} "
                         f"has vocab_size {target.vocab_size}, {flag} {draft_spec} has "
                         f"vocab_size {draft.vocab_size}")
    return bind_draft(target, draft, draft_spec, target_spec, flag)


def require_token_draft(draft, draft_spec: str, program: str, why: str) -> None:
    """Raises `ModelError` if `draft` is a feature draft, which `program` cannot drive
    (`why` says what it does instead)."""
    if is_feature_draft(draft):
        raise ModelError(f"{program} does not take a feature draft (--draft {draft_spec}): "
                         f"{why}")


def check_draft_k(draft, ks: Sequence, where: str, fix: str = "lower --k",
                  auto_k_max: int = 0) -> None:
    """Raises `ModelError` (one line) if `draft` cannot draft the longest of `ks` per round
    (a Medusa draft: one token per head), so that a run fails before any decoding.

    Args:
      draft: any draft; only those with a `check_k(k)` (Medusa heads) can refuse.
      ks: the --k entries: ints (0: autoregressive) and "auto", which drafts up to
        `auto_k_max` tokens per round.
      where: names the draft in the message, e.g. "--draft zoo:tiny-code-medusa".
      fix: what to change, ending the message.
    """
    check_k = getattr(draft, "check_k", None)
    longest = [(k, f"--k {k}") for k in ks if isinstance(k, int) and k > 0]
    if auto_k_max > 0 and any(isinstance(k, str) for k in ks):
        longest.append((auto_k_max, f"--k auto (up to --auto_k_max {auto_k_max} per round)"))
    if check_k is None or not longest:
        return
    k, flag = max(longest, key=lambda entry: entry[0])  # A fixed k first on a tie.
    try:
        check_k(k)
    except ValueError as e:
        if flag.startswith("--k auto"):
            fix += " or --auto_k_max"
        raise ModelError(f"{flag} is too long for {where}: {e}; {fix}") from None


DEFAULT_NUM_PROMPTS = 8
PROMPTS_FORMAT = 'one JSON object per line, e.g. {"prompt": "def add(a, b):"}'


class PromptsError(ValueError):
    """Bad --prompts input (or no tokenizer for it); the message is one line."""


@contextlib.contextmanager
def exit_on_input_error():
    """Turns a `PromptsError` or `ModelError` raised inside into "error: MESSAGE" on stderr
    and exit status 2 (argparse's status for bad arguments), without a traceback."""
    try:
        yield
    except (PromptsError, ModelError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None


exit_on_prompts_error = exit_on_input_error  # The name the benchmarks' mains used first.


def read_prompts_file(path: str, num_prompts: Optional[int] = None) -> List[Tuple[int, str]]:
    """(line number, prompt text) of the first `num_prompts` prompts of a JSONL file (all of
    them if None; later lines are not read).

    Raises:
      PromptsError: the file is missing or unreadable, has no prompts, or a line (up to the
        last one read) is not a JSON object with a string "prompt".
    """
    if num_prompts is not None and num_prompts < 1:
        raise PromptsError(f"--num_prompts must be at least 1, got {num_prompts}")
    out = []
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                if num_prompts is not None and len(out) >= num_prompts:
                    break
                where = f"--prompts {path} line {number}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise PromptsError(f"{where} is not UTF-8 text; save the file as UTF-8 "
                                       f"with {PROMPTS_FORMAT}") from None
                if not line.strip():
                    continue  # Blank lines (a trailing newline, spacing) are not prompts.
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as e:
                    raise PromptsError(f"{where} is not JSON ({e.msg}); write "
                                       f"{PROMPTS_FORMAT}") from None
                text = value.get("prompt") if isinstance(value, dict) else None
                if not isinstance(text, str):
                    raise PromptsError(f"{where} has no string \"prompt\" field; write "
                                       f"{PROMPTS_FORMAT}")
                out.append((number, text))
    except FileNotFoundError:
        raise PromptsError(f"--prompts {path}: no such file; pass a JSONL file with "
                           f"{PROMPTS_FORMAT}") from None
    except OSError as e:
        raise PromptsError(f"--prompts {path}: cannot read it "
                           f"({e.strerror or type(e).__name__}); pass a JSONL file with "
                           f"{PROMPTS_FORMAT}") from None
    if not out:
        raise PromptsError(f"--prompts {path} has no prompts; write {PROMPTS_FORMAT}")
    return out


def prompts_from_file(path: str, tokenizer, limit: Optional[int] = None,
                      num_prompts: Optional[int] = None) -> List[List[int]]:
    """Token-id lists of the first `num_prompts` prompts of the JSONL file `path` (all if
    None), encoded with `tokenizer` (no EOS, as the built-in pool) and cut to their last
    `limit` tokens if `limit` is set.

    Raises:
      PromptsError: see `read_prompts_file`; also a prompt that encodes to no tokens.
    """
    out = []
    for number, text in read_prompts_file(path, num_prompts):
        ids = list(tokenizer.encode(text))
        if not ids:
            raise PromptsError(f"--prompts {path} line {number}: the prompt encodes to no "
                               f"tokens; give it some text or delete the line")
        out.append(ids[-limit:] if limit else ids)  # Keep the end: the text to continue.
    return out


def target_tokenizer(target_spec: str, target):
    """The tokenizer of `target` (its `tokenizer_path`, else the spec's)."""
    return tfspec.load_tokenizer(getattr(target, "tokenizer_path", None) or target_spec)


def prompts(target_spec: str, target, num_prompts: Optional[int] = DEFAULT_NUM_PROMPTS,
            prompt_length: int = 16, seed: int = 0,
            prompts_file: Optional[str] = None) -> List[List[int]]:
    """`num_prompts` prompts (token-id lists) for `target`.

    Random targets: random ids in [3, vocab) of length `prompt_length` (ids 0-2 are pad, EOS,
    UNK). Checkpoints: the first `num_prompts` held-out code-completion prompts, tokenized
    with the checkpoint's tokenizer and cut to the model's `max_prompt_length` if it has one.
    With `prompts_file` (any target with a tokenizer): the first `num_prompts` prompts of
    that JSONL file (all of them if None), tokenized and cut the same way
    (`prompts_from_file`).

    Raises:
      PromptsError: bad `prompts_file`, or a target without a tokenizer to encode it.
    """
    limit = getattr(target, "max_prompt_length", None)
    if prompts_file:
        read_prompts_file(prompts_file, 1)  # A missing/bad file fails before the tokenizer.
        try:
            tokenizer = target_tokenizer(target_spec, target)
        except (OSError, ValueError, TypeError) as e:
            reason = " ".join(str(e).split()) or type(e).__name__
            raise PromptsError(f"--prompts needs the target's tokenizer, and --target "
                               f"{target_spec} has none ({reason}); use a checkpoint target "
                               f"with its spiece.model") from None
        try:
            tfspec.tokenizer.check_vocab(tokenizer, target.vocab_size)
        except ValueError as e:
            raise PromptsError(f"--prompts: {' '.join(str(e).split())}") from None
        return prompts_from_file(prompts_file, tokenizer, limit, num_prompts)
    if num_prompts is None:
        num_prompts = DEFAULT_NUM_PROMPTS
    if is_random(target_spec):
        rng = np.random.RandomState(seed)
        return [rng.randint(3, target.vocab_size, size=prompt_length).tolist()
                for _ in range(num_prompts)]
    from recipes.tiny_code import corpus as corpus_lib  # Deferred: only needed here.
    tokenizer = target_tokenizer(target_spec, target)
    items = corpus_lib.build_corpus().completion("validation")[:num_prompts]
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
