"""What one speculative round costs compared with one autoregressive step.

At batch 1, with a T5 target of t5-base shape (random weights, float32) and a unigram NGram
draft (whose cost is measured and subtracted), this reports autoregressive ms/token,
speculative ms/round for each k, and the ratio
    (round time at k - k * draft step time) / (autoregressive step time),
i.e. how close verifying k + 1 positions in one target call comes to the price of one.
Goal: <= 1.15 at k = 4 on a CPU (1.05-1.08 here since the attention kernel; README).

    python -m bench.loop_overhead --preset t5-base --k 1,2,3,4,5,6,7,8 --json runs/bench/loop_overhead.json
    python -m bench.loop_overhead --prompts my_prompts.jsonl --num_prompts 4 --k 2,4

The prompt is one random-token prompt of --prompt_length. --prompts FILE decodes your prompts
instead, one at a time (batch 1), each timed call covering all of them: JSONL, one
{"prompt": "text"} per line, tokenized with --tokenizer (default the embedded
zoo:tiny-code-target tokenizer; its vocabulary must fit the target's, else a one-line error);
--num_prompts N takes the file's first N (default: all). Bad input stops with a one-line error
naming the file and line (exit status 2). --preset also takes `T5Config` overrides,
PRESET:key=val,... (as bench/models.py's random: specs).

All modes are timed in alternation, medians over --repeats (`bench.timing.interleaved_runs`).

Random weights make the draft's acceptance near zero, so rounds ~= tokens; that is what is
wanted here: every round pays for a full draft block and a full (k + 1)-position verify.
"""

import platform
from typing import Optional, Sequence

import numpy as np

import tfspec
from bench import models as bench_models
from bench import timing
from evals import cli

DEFAULT_TOKENIZER = "zoo:tiny-code-target"


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.loop_overhead", __doc__.split("\n")[0])
    parser.add_argument("--preset", default="t5-base",
                        help="T5Config preset of the target, optionally with overrides: "
                             "PRESET:key=val,... (e.g. t5-small:num_layers=1)")
    parser.add_argument("--k", default="1,2,3,4,5,6,7,8", help="comma-separated draft lengths")
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--prompt_length", type=int, default=16,
                        help="length of the random prompt (without --prompts)")
    parser.add_argument("--prompts", default=None, metavar="FILE",
                        help='JSONL file of {"prompt": text} lines to decode (one at a time) '
                             "instead of one random prompt, tokenized with --tokenizer")
    parser.add_argument("--num_prompts", type=int, default=None,
                        help="with --prompts: the first N prompts of the file (default: all)")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, metavar="SPEC",
                        help="tokenizer of --prompts (used only with --prompts); its "
                             "vocabulary must fit the target's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eager", action="store_true",
                        help="decode eagerly, without XLA (quick checks only)")
    parser.add_argument("--json", default="", help="write the records here")
    return parser.parse_args(argv)


def target_config(preset: str) -> tfspec.models.T5Config:
    """The `T5Config` of a --preset value: "PRESET" or "PRESET:key=val,..."."""
    return bench_models.parse_random_config(f"random:{preset}")


def file_prompts(path: str, tokenizer_spec: str, config: tfspec.models.T5Config,
                 num_prompts: Optional[int] = None) -> list:
    """The --prompts pool: the file's first `num_prompts` prompts (all if None), tokenized
    with `tokenizer_spec`.

    Raises:
      bench_models.PromptsError: bad file, unloadable tokenizer, or a tokenizer vocabulary
        larger than the target's.
    """
    bench_models.read_prompts_file(path, num_prompts)  # Fail on the file before the rest.
    try:
        tokenizer = tfspec.load_tokenizer(tokenizer_spec)
    except (OSError, ValueError, TypeError) as e:
        raise bench_models.PromptsError(
            f"cannot load --tokenizer {tokenizer_spec} for --prompts: "
            f"{' '.join(str(e).split()) or type(e).__name__}") from None
    if int(tokenizer.vocab_size) > int(config.vocab_size):
        raise bench_models.PromptsError(
            f"--tokenizer {tokenizer_spec} has vocab_size {tokenizer.vocab_size}, more than the "
            f"target's {config.vocab_size}; pass a tokenizer whose ids fit, or a --preset with "
            f"vocab_size >= {tokenizer.vocab_size}")
    return bench_models.prompts_from_file(path, tokenizer, num_prompts=num_prompts)


def run(preset, ks, max_new_tokens: int, prompt_length: int, repeats: int,
        prompts: Optional[Sequence[Sequence[int]]] = None,
        jit_compile: Optional[bool] = True) -> dict:
    """Records per k (see the module docstring).

    Args:
      preset: a --preset value, or a `T5Config`.
      prompts: token-id lists decoded one at a time (each timed call covers all of them);
        None: one random prompt of `prompt_length`.
      jit_compile: as `tfspec.generate` (None: eager, for tests).
    """
    config = preset if isinstance(preset, tfspec.models.T5Config) else target_config(preset)
    target = tfspec.models.T5(config, seed=0)
    rng = np.random.RandomState(0)
    unigram = rng.dirichlet(np.ones(config.vocab_size)).astype(np.float32)
    draft = tfspec.models.NGram(np.log(unigram))
    random_prompt = rng.randint(3, config.vocab_size, size=prompt_length).tolist()
    pool = [list(p) for p in prompts] if prompts is not None else [random_prompt]
    greedy = tfspec.Sampling(temperature=0.0)

    def call(model, k, d=None):
        return lambda: [tfspec.generate(model, [prompt], draft=d, k=k, sampling=greedy,
                                        max_new_tokens=max_new_tokens, eos_id=None,
                                        jit_compile=jit_compile)
                        for prompt in pool]

    def rounds_of(gens):
        return sum(int(gen.stats.rounds[0]) for gen in gens)

    # Every mode in alternation (`timing.interleaved_runs`): the step's time moves by up to ~40%
    # between runs minutes apart on a shared machine (t5-base: 12.2-17.5 ms), and timing the
    # modes one after the other put that drift into the ratio.
    fns = [call(target, 0), call(draft, 0)] + [call(target, k, draft) for k in ks]
    times, results = timing.interleaved_runs(fns, repeats)
    ar_step = times[0] / rounds_of(results[0])
    draft_step = times[1] / (max_new_tokens * len(pool))  # No EOS: every row is full length.
    records = []
    for k, spec_time, gens in zip(ks, times[2:], results[2:]):
        rounds = rounds_of(gens)
        round_time = spec_time / rounds
        records.append({
            "k": k, "rounds": rounds,
            "ar_ms_per_step": 1e3 * ar_step,
            "spec_ms_per_round": 1e3 * round_time,
            "draft_ms_per_step": 1e3 * draft_step,
            "round_over_step": round_time / ar_step,
            "round_minus_draft_over_step": (round_time - k * draft_step) / ar_step,
        })
    name = preset if isinstance(preset, str) else "custom"
    return {"preset": name, "batch_size": 1, "num_prompts": len(pool),
            "max_new_tokens": max_new_tokens,
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    ks = [int(k) for k in args.k.split(",") if k]
    config = target_config(args.preset)
    prompts = None
    if args.prompts:
        with bench_models.exit_on_input_error():
            prompts = file_prompts(args.prompts, args.tokenizer, config, args.num_prompts)
    result = run(config, ks, args.max_new_tokens, args.prompt_length, args.repeats, prompts,
                 jit_compile=None if args.eager else True)
    result["preset"] = args.preset
    result["prompts"] = args.prompts
    timing.print_table(result["records"], ["k", "ar_ms_per_step", "spec_ms_per_round",
                                           "draft_ms_per_step", "round_over_step",
                                           "round_minus_draft_over_step"])
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
