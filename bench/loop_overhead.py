"""What one speculative round costs compared with one autoregressive step.

At batch 1, with a T5 target of t5-base shape (random weights, float32) and a unigram NGram
draft (whose cost is measured and subtracted), this reports autoregressive ms/token,
speculative ms/round for each k, and the ratio
    (round time at k - k * draft step time) / (autoregressive step time),
i.e. how close verifying k + 1 positions in one target call comes to the price of one.
Goal: <= 1.5 at k = 4 on a CPU.

    python -m bench.loop_overhead --preset t5-base --k 1,2,3,4,5,6,7,8 --json runs/bench/loop_overhead.json

Random weights make the draft's acceptance near zero, so rounds ~= tokens; that is what is
wanted here: every round pays for a full draft block and a full (k + 1)-position verify.
"""

import argparse
import platform

import numpy as np

import tfspec
from bench import timing


def _parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5-base", help="T5Config preset of the target")
    parser.add_argument("--k", default="1,2,3,4,5,6,7,8", help="comma-separated draft lengths")
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--prompt_length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="", help="write the records here")
    return parser.parse_args(argv)


def run(preset: str, ks, max_new_tokens: int, prompt_length: int, repeats: int) -> dict:
    config = tfspec.models.T5Config.preset(preset)
    target = tfspec.models.T5(config, seed=0)
    rng = np.random.RandomState(0)
    unigram = rng.dirichlet(np.ones(config.vocab_size)).astype(np.float32)
    draft = tfspec.models.NGram(np.log(unigram))
    prompt = [rng.randint(3, config.vocab_size, size=prompt_length).tolist()]
    greedy = tfspec.Sampling(temperature=0.0)

    def call(model, k, d=None):
        return lambda: tfspec.generate(model, prompt, draft=d, k=k, sampling=greedy,
                                       max_new_tokens=max_new_tokens, eos_id=None)

    ar_time, ar_gen = timing.best_time(call(target, 0), repeats)
    draft_time, _ = timing.best_time(call(draft, 0), repeats)
    ar_step = ar_time / int(ar_gen.stats.rounds[0])
    draft_step = draft_time / max_new_tokens
    records = []
    for k in ks:
        spec_time, gen = timing.best_time(call(target, k, draft), repeats)
        rounds = int(gen.stats.rounds[0])
        round_time = spec_time / rounds
        records.append({
            "k": k, "rounds": rounds,
            "ar_ms_per_step": 1e3 * ar_step,
            "spec_ms_per_round": 1e3 * round_time,
            "draft_ms_per_step": 1e3 * draft_step,
            "round_over_step": round_time / ar_step,
            "round_minus_draft_over_step": (round_time - k * draft_step) / ar_step,
        })
    return {"preset": preset, "batch_size": 1, "max_new_tokens": max_new_tokens,
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    ks = [int(k) for k in args.k.split(",") if k]
    result = run(args.preset, ks, args.max_new_tokens, args.prompt_length, args.repeats)
    timing.print_table(result["records"], ["k", "ar_ms_per_step", "spec_ms_per_round",
                                           "draft_ms_per_step", "round_over_step",
                                           "round_minus_draft_over_step"])
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
