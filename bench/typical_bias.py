"""How far Medusa's typical acceptance moves the output from the target's distribution.

    python -m bench.typical_bias --json bench/results/typical_bias.json

On the enumerable tiny T5 pair of the exactness tests (`tfspec.testing.tiny_t5`: V = 5, a
random T5 target and a different, narrower T5 draft), every temperature decodes `--rows`
rows of one prompt speculatively at `--k`, once with the exact rule and once with typical
acceptance (`tfspec.generate(acceptance=TypicalAcceptance(epsilon, delta))`), and holds the
first `--length` tokens of the rows against their exact joint law, enumerated from the
target's uncached forward pass. Per (temperature, rule):

    tv               total-variation distance between the rows' empirical law and the
                     exact one (0.5 sum_s |count_s / N - P_s|, over all sequences s)
    g_test_pvalue    G-test of the rows against the exact law (cells with expected count
                     < 5 pooled); an exact sampler gives p ~ U(0, 1)
    samples          N, the rows
    acceptance_rate  accepted / drafted
    mean_tokens_per_round, beta_mean
                     what typical acceptance buys: longer accepted runs

and per temperature `noise_floor_tv` (mean and std of the TV distance of N i.i.d. samples of
the exact law itself): an exact rule's `tv` sits at the floor, a biased one above it. At
temperature 0 typical acceptance IS the exact greedy rule (no bias to measure); above 0 it
is NOT distribution-preserving, which is what this measures. The numbers are for this toy
pair (near-uniform 5-token distributions, where almost every drafted token clears Medusa's
threshold), not a prediction for a real pair.

JSON: {"settings": {...}, "records": [...]} with one record per (temperature, rule), plus
`noise_floor_tv` and `noise_floor_tv_std` on each.
"""

import argparse
from typing import Optional, Sequence

import tfspec  # First: it keeps TensorFlow's native start-up logs quiet (tfspec.quiet).
from bench import timing
from evals import cli
from tfspec import acceptance as acceptance_lib
from tfspec.testing import exact_reference
from tfspec.testing import tiny_t5

COLUMNS = ["temperature", "rule", "samples", "tv", "noise_floor_tv", "g_test_pvalue",
           "acceptance_rate", "mean_tokens_per_round"]
NOISE_DRAWS = 20


def measure(target, draft, table, sampling: tfspec.Sampling, acceptance, rows: int, k: int,
            length: int, seed: int = 0, jit_compile: Optional[bool] = True) -> dict:
    """One (temperature, rule) record (see the module docstring).

    Args:
      target, draft: the enumerable pair (`tiny_t5.enumerable_pair`).
      table: the target's `tiny_t5.next_probs_table`.
      sampling: the sampling transform.
      acceptance: `tfspec.generate`'s acceptance ("exact" or a `TypicalAcceptance`).
      rows: samples, decoded in one call (each row its own key).
      k: draft tokens per round.
      length: leading tokens compared (<= `tiny_t5.LENGTH`).
      seed: request seed.
      jit_compile: as `tfspec.generate`'s.
    """
    gen = tfspec.generate(target, [list(tiny_t5.PROMPT)] * rows, draft=draft, k=k,
                          max_new_tokens=length, sampling=sampling, seed=seed, eos_id=None,
                          acceptance=acceptance, jit_compile=jit_compile)
    observed = exact_reference.observed_sequences(gen.tokens, gen.lengths, length)
    expected = tiny_t5.exact_distribution(table, sampling, length)
    return {"temperature": sampling.temperature, "rule": gen.acceptance,
            "distribution_preserving": (gen.acceptance == acceptance_lib.EXACT
                                        or sampling.greedy),
            "samples": rows, "tv": exact_reference.total_variation(observed, expected),
            "g_test_pvalue": exact_reference.g_test_pvalue(observed, expected),
            "acceptance_rate": gen.stats.acceptance_rate, "beta_mean": gen.stats.beta_mean,
            "mean_tokens_per_round": gen.stats.mean_tokens_per_round}


def run(temperatures: Sequence[float] = (1.0, 0.7), rows: int = 20000, k: int = 2,
        length: int = 3, epsilon: float = acceptance_lib.TYPICAL_EPSILON,
        delta: float = acceptance_lib.TYPICAL_DELTA, seed: int = 0,
        jit_compile: Optional[bool] = True) -> dict:
    """Records for every (temperature, rule); see the module docstring."""
    typical = tfspec.TypicalAcceptance(epsilon=epsilon, delta=delta)
    target, draft = tiny_t5.enumerable_pair()
    table = tiny_t5.next_probs_table(target)
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        expected = tiny_t5.exact_distribution(table, sampling, length)
        floor, floor_std = exact_reference.total_variation_noise(expected, rows, NOISE_DRAWS,
                                                                 seed)
        for acceptance in (acceptance_lib.EXACT, typical):
            record = measure(target, draft, table, sampling, acceptance, rows, k, length,
                             seed, jit_compile)
            record.update(noise_floor_tv=floor, noise_floor_tv_std=floor_std)
            records.append(record)
    return {"settings": {"pair": "tfspec.testing.tiny_t5", "vocab_size": tiny_t5.VOCAB,
                         "prompt": list(tiny_t5.PROMPT), "rows": rows, "k": k,
                         "length": length, "typical_epsilon": typical.epsilon,
                         "typical_delta": typical.delta, "seed": seed,
                         "noise_floor_draws": NOISE_DRAWS},
            "records": records}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _length(text: str) -> int:
    value = _positive_int(text)
    if value > tiny_t5.LENGTH:
        raise argparse.ArgumentTypeError(
            f"must be at most {tiny_t5.LENGTH} (the enumerated length), got {value}")
    return value


def _temperatures(text: str) -> list:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(not t > 0 for t in values):
        raise argparse.ArgumentTypeError(
            f"takes comma-separated temperatures > 0 (at 0 typical acceptance is the exact "
            f"greedy rule), got {text!r}")
    return values


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.typical_bias", __doc__.split("\n")[0])
    parser.add_argument("--temperature", default=[1.0, 0.7], type=_temperatures,
                        help="comma-separated temperatures > 0 (default: 1,0.7)")
    parser.add_argument("--rows", type=_positive_int, default=20000,
                        help="samples per (temperature, rule), decoded in one call")
    parser.add_argument("--k", type=_positive_int, default=2, help="draft tokens per round")
    parser.add_argument("--length", type=_length, default=3,
                        help="leading tokens whose joint law is compared")
    parser.add_argument("--typical_epsilon", type=float, default=acceptance_lib.TYPICAL_EPSILON,
                        help="typical acceptance's hard threshold, in (0, 1]")
    parser.add_argument("--typical_delta", type=float, default=acceptance_lib.TYPICAL_DELTA,
                        help="typical acceptance's entropy-threshold factor, > 0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="write the result here")
    parser.add_argument("--eager", action="store_true",
                        help="decode eagerly, without XLA (quick checks only)")
    args = parser.parse_args(argv)
    try:
        tfspec.TypicalAcceptance(epsilon=args.typical_epsilon, delta=args.typical_delta)
    except ValueError as e:
        parser.error(str(e).replace("TypicalAcceptance epsilon", "--typical_epsilon")
                     .replace("TypicalAcceptance delta", "--typical_delta"))
    return args


def main(argv=None):
    args = _parse_args(argv)
    result = run(args.temperature, args.rows, args.k, args.length, args.typical_epsilon,
                 args.typical_delta, args.seed, None if args.eager else True)
    timing.print_table(result["records"], COLUMNS)
    print("typical acceptance: NOT distribution-preserving at temperature > 0")
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
