"""An enumerable tiny T5 pair: a random T5 target (V = 5) and a different tiny T5 draft.

Shared by the distribution tests through real KV caches (`tests/tfspec/test_t5_exactness.py`)
and by `bench.typical_bias`. ONE uncached `T5.forward` over all VOCAB**(LENGTH - 1) decoder
inputs gives a model's next-token distribution after every prefix shorter than LENGTH
(`next_probs_table`), and `exact_reference.enumerate_distribution` turns that into the exact
joint law of the first tokens, to hold thousands of cached speculative rows against.

    target, draft = tiny_t5.enumerable_pair()         # in a strategy scope if needed
    table = tiny_t5.next_probs_table(target)          # {prefix: float64 [VOCAB]}
    expected = tiny_t5.exact_distribution(table, tfspec.Sampling(temperature=1.0))
"""

import itertools
from typing import Dict, Tuple

import numpy as np

from tfspec.models import T5, T5Config
from tfspec.testing import exact_reference

VOCAB = 5
LENGTH = 5
PROMPT = (2, 3, 4)
# Gains on the target decoder's self-attention output projection and relative position
# bias: with them the random model depends strongly on earlier decoder positions, i.e. on
# its KV cache. Without them a loop that verified every row at the batch's smallest
# position went unnoticed.
TARGET_GAINS = {
    "decoder.block.0.layer.0.SelfAttention.o.weight": 6.0,
    "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": 4.0,
}
TARGET_SEED, DRAFT_SEED = 1, 11
TARGET_WIDTH, DRAFT_WIDTH = 16, 8


def config(d_model: int) -> T5Config:
    """A one-layer T5 of width `d_model` over VOCAB tokens (EOS 1, start and pad 0)."""
    return T5Config(vocab_size=VOCAB, d_model=d_model, d_kv=4, d_ff=2 * d_model,
                    num_layers=1, num_decoder_layers=1, num_heads=2,
                    relative_attention_num_buckets=8, relative_attention_max_distance=16,
                    feed_forward_proj="relu", tie_word_embeddings=True,
                    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def enumerable_pair() -> Tuple[T5, T5]:
    """(target, draft): different widths and seeds; the target's gains applied.

    Create them inside `strategy.scope()` to decode under a `tf.distribute` strategy.
    """
    target = T5(config(TARGET_WIDTH), seed=TARGET_SEED)
    weights = target.hf_weight_map()  # Checkpoint names: independent of the layout.
    for name, gain in TARGET_GAINS.items():
        variable, _ = weights[name]
        variable.assign(variable * gain)
    draft = T5(config(DRAFT_WIDTH), seed=DRAFT_SEED)
    return target, draft


def next_probs_table(model, prompt=PROMPT, length: int = LENGTH) -> Dict[tuple, np.ndarray]:
    """{emitted prefix: float64 [V]} for every prefix shorter than `length`, uncached.

    One `forward` over all VOCAB**(length - 1) decoder inputs [start, t_1 .. t_{length-1}]:
    its logits at index i are the next-token logits after the prefix t_1 .. t_i.
    """
    vocab = model.vocab_size
    tails = list(itertools.product(range(vocab), repeat=length - 1))
    decoder_ids = np.array([[model.decoder_start_id, *tail] for tail in tails], np.int32)
    encoder_ids = np.tile(np.array([list(prompt)], np.int32), [len(tails), 1])
    logits = model.forward(encoder_ids, None, decoder_ids).numpy().astype(np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    table = {}
    for tail, row in zip(tails, probs):
        for i in range(length):
            table[tail[:i]] = row[i]
    return table


def exact_distribution(table: Dict[tuple, np.ndarray], sampling,
                       length: int = LENGTH) -> dict:
    """{tuple of `length` tokens: probability} under `sampling` (a `tfspec.Sampling`), from a
    `next_probs_table` (length <= the table's)."""
    vocab = len(table[()])
    return exact_reference.enumerate_distribution(table.__getitem__, vocab, length,
                                                  sampling.temperature, sampling.top_k,
                                                  sampling.top_p)
