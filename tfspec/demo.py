"""A two-minute tour that needs nothing but the installed package: `python -m tfspec.demo`.

It tokenizes a few built-in code prompts with the shipped tokenizer, builds a small randomly
initialised T5 target, and decodes greedily three ways through the same compiled loop:
autoregressively, with a prompt-lookup draft and with a random T5 draft. Greedy speculative
decoding must reproduce the autoregressive tokens exactly; the demo checks that and prints
acceptance and timing. (Random weights make acceptance low, so no speed-up is expected here;
the trained embedded pair is what `python -m evals.run` uses.)
"""

import argparse
import sys
import time

import numpy as np

import tfspec
from tfspec.models import T5, T5Config, PromptLookup


def _config(vocab_size: int, d_model: int, layers: int, decoder_layers: int) -> T5Config:
    return T5Config(vocab_size=vocab_size, d_model=d_model, d_kv=32, d_ff=4 * d_model,
                    num_layers=layers, num_decoder_layers=decoder_layers,
                    num_heads=d_model // 32, relative_attention_num_buckets=32,
                    relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
                    tie_word_embeddings=False, layer_norm_epsilon=1e-6, pad_token_id=0,
                    eos_token_id=1, decoder_start_token_id=0)


# HumanEval-shaped prompts (signature + docstring), written for the demo.
_PROMPTS = (
    'def clamp(value, low, high):\n    """Returns value limited to the range [low, high]."""\n',
    'import os\n\n\ndef total_size(paths):\n    """Returns the summed size in bytes of the '
    'files in paths."""\n',
    'def count_words(text):\n    """Returns a dict mapping each word of text to its '
    'count."""\n',
    'class Stack:\n    def push(self, item):\n        """Adds item on top of the stack."""\n',
)


def _prompts(tokenizer, count: int):
    """`count` prompts, cycling through the built-in ones."""
    return [tokenizer.encode(_PROMPTS[i % len(_PROMPTS)]) for i in range(count)]


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                    argparse.RawDescriptionHelpFormatter):
    """Defaults in the help (unless None or empty: the help says what happens), the
    description's line breaks kept (as `evals.cli`)."""

    def _get_help_string(self, action):
        if action.default is None or action.default in ("", []):
            return action.help
        return super()._get_help_string(action)


class _ArgumentParser(argparse.ArgumentParser):
    """The command-line convention of every entry point (as `evals.cli`, which the library may
    not import): `-h`/`--help` exit 0 with defaults shown, no abbreviations, and a bad flag
    is one line on stderr with exit status 2."""

    def __init__(self, prog: str, description: str):
        super().__init__(prog=prog, description=description, formatter_class=_HelpFormatter,
                         allow_abbrev=False)
        self.add_argument("--verbose", action="store_true",
                          help="show TensorFlow's native (C++) logs (same as "
                               "TFSPEC_VERBOSE=1)")

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv=None) -> int:
    parser = _ArgumentParser("python -m tfspec.demo", __doc__)
    parser.add_argument("--num_prompts", type=int, default=4, help="held-out code prompts")
    parser.add_argument("--max_new_tokens", type=int, default=32, help="tokens per prompt")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per round")
    args = parser.parse_args(argv)

    tokenizer = tfspec.load_tokenizer("zoo:tiny-code-target")
    prompts = _prompts(tokenizer, args.num_prompts)
    target = T5(_config(tokenizer.vocab_size, 256, 2, 4), seed=0)
    drafts = {"prompt lookup": PromptLookup(max_ngram=3),
              "random T5 draft": T5(_config(tokenizer.vocab_size, 128, 1, 1), seed=1)}
    greedy = tfspec.Sampling(temperature=0.0)

    def run(draft, k):
        kwargs = dict(draft=draft, k=k, max_new_tokens=args.max_new_tokens, sampling=greedy,
                      eos_id=None)
        tfspec.generate(target, prompts, **kwargs)  # Compile (not timed).
        start = time.perf_counter()
        gen = tfspec.generate(target, prompts, **kwargs)
        return gen, time.perf_counter() - start

    baseline, baseline_s = run(None, 0)
    tokens = int(baseline.lengths.sum())
    print(f"target: random T5, {sum(int(np.prod(v.shape)) for v in target.weights) / 1e6:.1f}M parameters; "
          f"{len(prompts)} code prompts; greedy; {args.max_new_tokens} new tokens")
    print(f"  autoregressive      {1e3 * baseline_s / tokens:7.2f} ms/token")
    ok = True
    for name, draft in drafts.items():
        gen, seconds = run(draft, args.k)
        same = np.array_equal(gen.tokens, baseline.tokens)
        ok &= same
        print(f"  {name:<19s} {1e3 * seconds / tokens:7.2f} ms/token  k={args.k}  "
              f"acceptance {gen.stats.acceptance_rate:.2f}  tokens/round "
              f"{gen.stats.mean_tokens_per_round:.2f}  identical to autoregressive: {same}")
    print("first prompt's continuation:", repr(tokenizer.decode(baseline.row_tokens(0))[:80]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
