"""Shared tiny data for the training tests: a fake corpus, random examples, tiny shapes."""

import numpy as np

from tfspec.training import examples as examples_lib

TINY_T5 = dict(vocab_size=64, d_model=16, d_kv=4, num_heads=2, d_ff=24, num_layers=1,
               num_decoder_layers=1, feed_forward_proj="gated-gelu",
               tie_word_embeddings=False)


class FakeCorpus:
    """The `CodeCorpus` surface the training code uses, over in-memory records."""

    def __init__(self, completion, docsum):
        self._completion = completion
        self._docsum = docsum
        self.manifest = {"counts": {"completion": {s: len(v) for s, v in completion.items()},
                                    "docsum": {s: len(v) for s, v in docsum.items()}}}

    def completion(self, split):
        return list(self._completion[split])

    def docsum(self, split):
        return list(self._docsum[split])


def fake_corpus(n=6):
    def completion(i):
        return {"id": f"m.f{i}",
                "prompt": f"import os\n\n\ndef f{i}(x):\n    \"\"\"Returns x plus {i}.\"\"\"\n",
                "completion": f"    return x + {i}\n"}

    def docsum(i):
        return {"id": f"m.f{i}", "code": f"def f{i}(x):\n    return x + {i}\n",
                "summary": f"Returns x plus {i}."}

    return FakeCorpus({"train": [completion(i) for i in range(n)],
                       "validation": [completion(100 + i) for i in range(2)]},
                      {"train": [docsum(i) for i in range(n)],
                       "validation": [docsum(100 + i) for i in range(2)]})


def random_examples(count, vocab_size=64, seed=0, max_encoder=12, max_target=8):
    """Examples of random ids (ids >= 3, EOS-terminated targets)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        s = int(rng.integers(2, max_encoder + 1))
        t = int(rng.integers(2, max_target + 1))
        enc = rng.integers(3, vocab_size, size=s).astype(np.int32)
        tgt = np.append(rng.integers(3, vocab_size, size=t - 1), 1).astype(np.int32)
        out.append(examples_lib.Example(f"x:{i}", "completion", enc, tgt))
    return out


def tiny_stages_data(config, n=4):
    """`stages.Data` of a recipe config on an `n`-function fake corpus (no corpus build)."""
    from tfspec.tokenizer import TINY_CODE_TOKENIZER, load_tokenizer
    from tfspec.training import stages
    corpus = fake_corpus(n=n)
    tokenizer = load_tokenizer(TINY_CODE_TOKENIZER)
    kwargs = dict(max_encoder_length=config.data.max_encoder_length,
                  max_target_length=config.data.max_target_length)
    return stages.Data(tokenizer, corpus,
                       examples_lib.make_examples(corpus, tokenizer, "train", **kwargs),
                       examples_lib.make_examples(corpus, tokenizer, "validation", **kwargs),
                       ("fake",))
