"""Exact distributions of enumerable targets (NGram, tiny T5), independent of tfspec's TF code.

Used by the statistical exactness tests: the numpy transform below is a second, separate
implementation of temperature / top-k / top-p so a bug in `tfspec.sampling` cannot hide.
"""

from typing import Callable

import numpy as np


def transform(probs: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The sampling transform on one distribution (float64 [V])."""
    probs = np.asarray(probs, dtype=np.float64)
    if temperature == 0:
        out = np.zeros_like(probs)
        out[np.argmax(probs)] = 1.0
        return out
    with np.errstate(divide="ignore"):
        logits = np.log(probs) / temperature
    if top_k:
        kth = np.sort(logits)[::-1][top_k - 1]
        logits = np.where(logits < kth, -np.inf, logits)
    out = np.exp(logits - np.max(logits))
    out /= out.sum()
    if top_p < 1:
        order = np.argsort(-out, kind="stable")
        before = np.cumsum(out[order]) - out[order]
        cutoff = out[order][before < top_p].min()
        out = np.where(out >= cutoff, out, 0.0)
        out /= out.sum()
    return out


def enumerate_distribution(next_probs: Callable[[tuple], np.ndarray], vocab_size: int,
                           length: int, temperature: float, top_k: int = 0,
                           top_p: float = 1.0, eos_id=None) -> dict:
    """P(first `length` emitted tokens) of any model, by walking the tree of continuations.

    Args:
      next_probs: maps the tuple of tokens emitted so far (the prompt is the caller's
        business) to the model's untransformed next-token distribution, float [V].
      vocab_size: V.
      length: tokens per sequence.
      temperature, top_k, top_p: the sampling transform, applied here by `transform`.
      eos_id: sequences stop after this id (None: they never stop).

    Returns:
      {tuple of `length` ints: probability}; EOS-terminated tuples are padded with -1.
      Example, V = 2, length = 2, next_probs always [0.25, 0.75], no EOS:
      {(0, 0): 1/16, (0, 1): 3/16, (1, 0): 3/16, (1, 1): 9/16}.
    """
    result = {}

    def walk(emitted, prob):
        if prob == 0:
            return
        if len(emitted) == length:
            result[emitted] = result.get(emitted, 0.0) + prob
            return
        if emitted and eos_id is not None and emitted[-1] == eos_id:
            padded = emitted + (-1,) * (length - len(emitted))
            result[padded] = result.get(padded, 0.0) + prob
            return
        probs = transform(next_probs(emitted), temperature, top_k, top_p)
        for token in range(vocab_size):
            walk(emitted + (token,), prob * probs[token])

    walk((), 1.0)
    return result


def sequence_distribution(log_probs: np.ndarray, prompt, length: int, temperature: float,
                          top_k: int = 0, top_p: float = 1.0, eos_id=None) -> dict:
    """P(first `length` emitted tokens) for an NGram target, EOS-terminated rows padded with -1.

    Returns:
      {tuple of `length` ints: probability}; tuples after EOS hold -1.
    """
    table = np.exp(np.asarray(log_probs, dtype=np.float64))
    order = table.ndim

    def next_probs(emitted):
        if order == 1:
            return table
        # The previous n - 1 tokens, with id 0 before the start.
        context = ([0] * (order - 1) + list(prompt) + list(emitted))[-(order - 1):]
        return table[tuple(context)]

    return enumerate_distribution(next_probs, table.shape[-1], length, temperature, top_k,
                                  top_p, eos_id)


def transform_margin(probs: np.ndarray, temperature: float, top_p: float) -> float:
    """How far one distribution is from a top-p decision flipping under float32 rounding.

    The nucleus keeps sorted tokens whose preceding mass is < top_p; the kept set changes if
    a preceding mass crosses top_p or if the last kept and first dropped tokens swap. Returns
    the smallest of those distances (inf when top_p = 1), so a caller can require that the
    float32 transform of tfspec and the float64 one above keep the same tokens.
    """
    if top_p >= 1:
        return float("inf")
    tempered = transform(probs, temperature, 0, 1.0)
    ordered = np.sort(tempered)[::-1]
    before = np.cumsum(ordered) - ordered
    kept = int(np.sum(before < top_p))
    margin = float(np.min(np.abs(before - top_p)))
    if kept < len(ordered):
        margin = min(margin, float(ordered[kept - 1] - ordered[kept]))
    return margin


def observed_sequences(tokens: np.ndarray, lengths: np.ndarray, length: int) -> list:
    """Rows of generate() output as tuples of `length` ints, -1 after a row's end."""
    rows = []
    for row, n in zip(tokens, lengths):
        rows.append(tuple(int(t) if i < n else -1 for i, t in enumerate(row[:length])))
    return rows


def g_test_pvalue(observed: list, expected: dict, min_expected: float = 5.0) -> float:
    """G-test of observed sequences against an exact distribution.

    Cells whose expected count is below `min_expected` are pooled into one cell, as are
    observed sequences that have probability 0 (which makes the test fail loudly).
    """
    from scipy import stats  # Tests only.

    total = len(observed)
    counts = {}
    for seq in observed:
        counts[seq] = counts.get(seq, 0) + 1
    impossible = sum(c for seq, c in counts.items() if expected.get(seq, 0.0) == 0.0)
    if impossible:
        return 0.0
    obs, exp = [], []
    pooled_obs, pooled_exp = 0.0, 0.0
    for seq, prob in expected.items():
        if prob * total < min_expected:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += prob * total
        else:
            obs.append(counts.get(seq, 0))
            exp.append(prob * total)
    if pooled_exp > 0:
        obs.append(pooled_obs)
        exp.append(pooled_exp)
    exp = np.array(exp) * (sum(obs) / np.sum(exp))
    return float(stats.power_divergence(obs, exp, lambda_="log-likelihood").pvalue)


def random_table(rng: np.random.RandomState, vocab_size: int, order: int,
                 concentration: float = 0.7) -> np.ndarray:
    """Random NGram log-probabilities, float32 [V] * order."""
    shape = [vocab_size] * (order - 1)
    probs = rng.dirichlet(np.full(vocab_size, concentration), size=shape or None)
    return np.log(np.maximum(probs, 1e-12)).astype(np.float32)


def pair_marginal(log_probs: np.ndarray, prompt, position: int, temperature: float,
                  top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """P(x_t, x_{t+1}) for a bigram target (a Markov chain), t = `position` (1-based).

    Returns:
      float64 [V, V].
    """
    table = np.exp(np.asarray(log_probs, dtype=np.float64))
    assert table.ndim == 2, "pair_marginal needs a bigram table"
    step = np.stack([transform(row, temperature, top_k, top_p) for row in table])
    marginal = step[prompt[-1]]
    for _ in range(position - 1):
        marginal = marginal @ step
    return marginal[:, None] * step


def total_variation(observed: list, expected: dict) -> float:
    """TV distance between the empirical law of `observed` sequences and `expected`.

    0.5 * sum over all sequences of |count / N - P|, sequences of `expected` that were never
    observed and observed ones `expected` lacks (probability 0) included.

    Example: observed [(0,), (0,), (1,), (1,)] against {(0,): 0.75, (1,): 0.25} -> 0.25.
    """
    total = len(observed)
    counts = {}
    for seq in observed:
        counts[seq] = counts.get(seq, 0) + 1
    cells = set(counts) | set(expected)
    return 0.5 * float(sum(abs(counts.get(s, 0) / total - expected.get(s, 0.0))
                           for s in cells))


def total_variation_noise(expected: dict, samples: int, draws: int = 20,
                          seed: int = 0) -> tuple:
    """The sampling noise floor of `total_variation`: (mean, std) of the TV distance of
    `samples` i.i.d. draws of `expected` itself, over `draws` independent sets.

    An exact sampler's TV at that sample size sits around the mean; a biased one above.
    """
    rng = np.random.RandomState(seed)
    probs = np.array(list(expected.values()), dtype=np.float64)
    probs /= probs.sum()
    distances = [0.5 * float(np.abs(rng.multinomial(samples, probs) / samples - probs).sum())
                 for _ in range(draws)]
    return float(np.mean(distances)), float(np.std(distances))
