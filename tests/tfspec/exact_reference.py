"""Exact sequence distributions of NGram targets, computed independently of tfspec's TF code.

Used by the statistical exactness tests: the numpy transform below is a second, separate
implementation of temperature / top-k / top-p so a bug in `tfspec.sampling` cannot hide.
"""

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


def sequence_distribution(log_probs: np.ndarray, prompt, length: int, temperature: float,
                          top_k: int = 0, top_p: float = 1.0, eos_id=None) -> dict:
    """P(first `length` emitted tokens) for an NGram target, EOS-terminated rows padded with -1.

    Returns:
      {tuple of `length` ints: probability}; tuples after EOS hold -1.
    """
    table = np.exp(np.asarray(log_probs, dtype=np.float64))
    order = table.ndim
    vocab_size = table.shape[-1]
    result = {}

    def next_probs(history):
        if order == 1:
            return transform(table, temperature, top_k, top_p)
        # The previous n - 1 tokens, with id 0 before the start.
        context = ([0] * (order - 1) + list(history))[-(order - 1):]
        return transform(table[tuple(context)], temperature, top_k, top_p)

    def walk(history, emitted, prob):
        if prob == 0:
            return
        if len(emitted) == length:
            result[tuple(emitted)] = result.get(tuple(emitted), 0.0) + prob
            return
        if emitted and eos_id is not None and emitted[-1] == eos_id:
            padded = tuple(emitted + [-1] * (length - len(emitted)))
            result[padded] = result.get(padded, 0.0) + prob
            return
        probs = next_probs(history)
        for token in range(vocab_size):
            walk(history + [token], emitted + [token], prob * probs[token])

    walk(list(prompt), [], 1.0)
    return result


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
