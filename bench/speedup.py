"""Measured speed-up of speculative decoding against the walltime formula's prediction.

For a target/draft pair, each batch size and each temperature, this times (interleaved:
every repeat runs the target autoregressively, the draft autoregressively and the speculative
loop at every k, in turn, so noise on a shared machine hits all alike):

    ar_ms_per_token          target-only decoding (k = 0, same compiled loop), ms per emitted
                             token (real tokens: up to and including EOS, padding excluded)
    spec_ms_per_token        speculative decoding at k, ms per emitted token
    speedup                  ar_ms_per_token / spec_ms_per_token
    acceptance_rate          accepted / drafted draft tokens
    beta_mean                mean exact overlap sum_x min(p, q) over verified positions: the
                             paper's alpha, estimated
    draft_cost_ratio         c = draft ms per loop step / target ms per loop step, both decoding
                             autoregressively in this run (at batch 1 without early EOS this is
                             draft ms/token / target ms/token). A feature draft (EAGLE-
                             style, `tfspec.models.FeatureDraft`) cannot decode alone: its
                             steps are timed through `alone()` (the target's encoder, then
                             the draft fed its own predicted features)
    predicted_speedup        (1 - a^(k+1)) / ((1 - a)(k c + 1)) with a = beta_mean
                             (evals.walltime.predicted_speedup)
    speedup_over_predicted   speedup / predicted_speedup (goal: >= 0.9 at batch 1)

The formula models decoding only, but every request also pays once for its encoders (both
of them when speculating) and the call. With short outputs (the built-in pool ends at EOS
after ~27 tokens, with prompts of up to ~300) that one-off cost is a large share of the
time, and it also inflates the c above. With --fixed_costs every mode is timed a second
time, interleaved with the rest, with max_new_tokens = 1 (one loop iteration per call),
which splits its time into a per-call fixed cost and a per-iteration cost (without the flag
these fields are nan):

    full = calls x fixed + iterations x per_iteration     (iterations: loop rounds or steps,
    one  = calls x fixed + calls x per_iteration           summed over the calls)

    ar_fixed_ms, spec_fixed_ms   per generate call, outside the loop (encoders, call
                                 overhead); the speculative one at this k
    target_step_ms, draft_step_ms, round_ms
                                 one loop iteration of target AR, draft AR, speculative at k
    formula_round_ms             k x draft_step_ms + target_step_ms: what the formula
                                 charges for a round
    round_over_formula           round_ms / formula_round_ms (1.0 = a round costs what the
                                 formula assumes)
    decode_speedup               the speed-up of the loop alone: AR vs speculative ms per
                                 token with the fixed costs taken out
    decode_predicted_speedup     the formula with c = draft_step_ms / target_step_ms
    decode_over_predicted        decode_speedup / decode_predicted_speedup
    matched_speedup              the whole-request speed-up at one request length for
                                 all modes (the mean over them): at T > 0 each mode samples
                                 answers of other lengths, which moves its ms per token
                                 through the fixed cost (`matched_speedup`)
    speedup_ceiling              the whole-request speed-up if speculative rounds cost
                                 nothing: AR ms per request / spec_fixed_ms per request.
                                 No draft length or faster loop can beat it; only
                                 cheaper fixed costs (a draft without an encoder of its
                                 own, such as a feature draft, pays only the target's)

A decomposition that needs two loop iterations per call at least; with fewer (every row done
in its first round) the decode fields are nan. It doubles the compiled loops: one process
that compiled ~35 of them (k = 1..8 at two temperatures) ran out of memory maps in LLVM's
JIT here (vm.max_map_count 65530), so split such a sweep into runs of a few k each:

    python -m bench.speedup --k 1,2,4,6 --temperature 0 --fixed_costs

    python -m bench.speedup --k 1,2,4 --batch_size 1 --temperature 0 --json runs/bench/speedup.json
    python -m bench.speedup --target random:t5-small --draft random:t5-small:num_layers=1 \\
        --k 1,2 --max_new_tokens 16 --repeats 1
    python -m bench.speedup --prompts my_prompts.jsonl --num_prompts 16 --k 2,4

--prompts FILE decodes your prompts instead of the built-in held-out pool: JSONL, one
{"prompt": "text"} per line, tokenized with the target's tokenizer and cut to its
max_prompt_length (keeping the end); --num_prompts N then takes the file's first N (default:
all). Bad input stops with a one-line error naming the file and line (exit status 2).

The loaded models are frozen (`tfspec.freeze_weights`), as a serving process would freeze
them: no timed call checks their kernel panels against their weights, a pass over every
weight that cost 4-5 ms of a ~20 ms request of the embedded target and ~1 ms more for its
draft when checked (the speculative side pays both). --nofreeze_weights times the checked
calls (the default before 2026-12-07); the JSON's "weights_frozen" says which. The other
pair benchmarks (`add_pair_args`) and `bench.draft_kinds` take the same flag.

--acceptance exact,typical times Medusa's typical acceptance (`tfspec.TypicalAcceptance`,
--typical_epsilon / --typical_delta) beside the exact rule at every k. It is an opt-in that
is NOT distribution-preserving above temperature 0: its records carry "acceptance":
"typical" and "distribution_preserving": false (`bench.typical_bias` measures the bias).

JSON: {"records": [...]} with one record per (acceptance, k, batch_size, temperature), plus
the settings.
The formula assumes i.i.d. acceptance and a draft as costly per step as measured; random
models accept almost nothing, so their speed-up is below 1 by design (a cost check only).
"""

import argparse
import dataclasses
import math
import platform
import sys
from typing import List, Optional, Sequence

import numpy as np

import tfspec
from tfspec import acceptance as acceptance_lib
from tfspec import adaptive
from tfspec import frozen
from tfspec import generation
from bench import models as bench_models
from bench import timing
from evals import cli
from evals import memory_maps
from evals import walltime

AUTO = "auto"  # The --k entry (and record "k") of adaptive draft length, k="auto".

COLUMNS = ["k", "auto_draft_cost", "acceptance", "batch_size", "temperature",
           "ar_ms_per_token", "spec_ms_per_token", "speedup",
           "acceptance_rate", "beta_mean", "draft_cost_ratio", "predicted_speedup",
           "speedup_over_predicted", "spec_fixed_ms", "round_over_formula", "decode_speedup",
           "decode_over_predicted", "matched_speedup", "speedup_ceiling"]


def _floats(text: str) -> List[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_ks(text: str) -> list:
    """Comma-separated draft lengths, each an integer >= 1 or "auto".

    Raises:
      argparse.ArgumentTypeError: any other entry.
    """
    ks = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item.lower() == "auto":
            ks.append(AUTO)
            continue
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f'--k entries must be integers >= 1 or "auto", got {item!r}')
        ks.append(value)
    if not ks:
        raise argparse.ArgumentTypeError("--k needs at least one draft length")
    return ks


def parse_acceptances(text: str) -> List[str]:
    """--acceptance "exact,typical" -> ["exact", "typical"] (argparse type: bad input is a
    one-line usage error)."""
    rules = [part.strip().lower() for part in text.split(",") if part.strip()]
    bad = [rule for rule in rules if rule not in acceptance_lib.RULES]
    if not rules or bad:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated rules from {', '.join(acceptance_lib.RULES)}, got "
            f"{text!r}")
    return list(dict.fromkeys(rules))


def _draft_cost(text: str) -> Optional[float]:
    """One --auto_draft_cost entry: "hf" (None) or a number >= 0."""
    if text.strip().lower() in ("hf", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0.0):
        raise argparse.ArgumentTypeError(f"must be hf or a number >= 0, got {text!r}")
    return value


def parse_draft_costs(text: str) -> List[Optional[float]]:
    """--auto_draft_cost: comma-separated entries, each "hf" (None) or a number >= 0.

    Raises:
      argparse.ArgumentTypeError: a bad entry, or none.
    """
    costs = [_draft_cost(item) for item in text.split(",") if item.strip()]
    if not costs:
        raise argparse.ArgumentTypeError("needs at least one entry (hf or a number >= 0)")
    return list(dict.fromkeys(costs))


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def load_pair_and_prompts(args, min_prompts: int = 0):
    """(target, draft, prompt pool) of the flags of `add_pair_args` (the models frozen
    unless --nofreeze_weights).

    The pool is the --prompts file (its first --num_prompts if given), else the built-in pool
    of max(--num_prompts, `min_prompts`) prompts. A bad --prompts file fails before the models
    are loaded.

    Raises:
      bench_models.PromptsError: bad --prompts input (see `bench_models.read_prompts_file`).
      bench_models.ModelError: a SPEC that cannot be loaded, a feature draft that cannot
        draft for the target, or a --k longer than the draft can draft (Medusa: its heads).
    """
    if args.prompts:
        bench_models.read_prompts_file(args.prompts, args.num_prompts)
        num_prompts = args.num_prompts
    else:
        num_prompts = max(args.num_prompts or bench_models.DEFAULT_NUM_PROMPTS, min_prompts)
    target, draft = bench_models.load_pair(args.target, args.draft, args.dtype)
    ks = getattr(args, "k", None)  # Not every benchmark has --k; some take one k.
    bench_models.check_draft_k(draft, ks if isinstance(ks, (list, tuple)) else [ks],
                               f"--draft {args.draft}",
                               auto_k_max=getattr(args, "auto_k_max", 0))
    if args.freeze_weights:
        tfspec.freeze_weights(target, draft)
    pool = bench_models.prompts(args.target, target, num_prompts, args.prompt_length,
                                args.seed, prompts_file=args.prompts)
    return target, draft, pool


def add_pair_args(parser: argparse.ArgumentParser, repeats: bool = True) -> None:
    """The --target/--draft/--dtype/prompt flags every pair benchmark takes (and --repeats,
    unless `repeats` is False: a benchmark that does not repeat timed runs)."""
    parser.add_argument("--target", default=bench_models.DEFAULT_TARGET,
                        help="target SPEC (see bench/models.py)")
    parser.add_argument("--draft", default=bench_models.DEFAULT_DRAFT,
                        help="draft SPEC (see bench/models.py): a T5, ngram:unigram, "
                             "prompt_lookup[:N], or a feature draft trained for --target")
    parser.add_argument("--dtype", default=None,
                        help="float32 or bfloat16 (a feature draft stays float32)")
    parser.add_argument("--prompts", default=None, metavar="FILE",
                        help='JSONL file of {"prompt": text} lines to decode instead of the '
                             "built-in held-out pool, tokenized with the target's tokenizer "
                             "and cut to its max_prompt_length (keeping the end)")
    parser.add_argument("--num_prompts", type=_positive_int, default=None,
                        help="prompt pool; every batch size decodes all of it, in "
                             f"consecutive batches (the last one filled by cycling). Default "
                             f"{bench_models.DEFAULT_NUM_PROMPTS} built-in prompts; with "
                             "--prompts, the first N prompts of the file (default: all)")
    parser.add_argument("--prompt_length", type=int, default=16,
                        help="length of random prompts (random targets without --prompts)")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    if repeats:
        parser.add_argument("--repeats", type=int, default=3,
                            help="timed, interleaved repeats after one warm-up")
    parser.add_argument("--top_k", type=int, default=0)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="write the result here")
    parser.add_argument("--eager", action="store_true",
                        help="decode eagerly, without XLA (quick checks only: the timings "
                             "then measure Python overhead, not the product)")
    cli.add_bool(parser, "freeze_weights", True,
                 "freeze the loaded models (tfspec.freeze_weights), as a serving process "
                 "would: nothing here changes their weights, so decoding skips the "
                 "per-request check of their kernel panels (4-5 ms of a ~20 ms request of "
                 "the embedded target); --nofreeze_weights keeps the check")


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.speedup", __doc__.split("\n")[0])
    add_pair_args(parser)
    parser.add_argument("--k", default="1,2,4", type=parse_ks,
                        help='comma-separated draft lengths; "auto" adds a row of '
                             'tfspec.generate(k="auto") (adaptive draft length, with '
                             'fallback to autoregressive decoding where that measured faster)')
    parser.add_argument("--batch_size", default="1", help="comma-separated batch sizes")
    parser.add_argument("--temperature", default="0", help="comma-separated temperatures")
    parser.add_argument("--auto_k_max", type=_positive_int,
                        default=adaptive.AutoDraft().k_max,
                        help='the compiled maximum draft length of the "auto" entry')
    parser.add_argument("--auto_confidence", type=float,
                        default=adaptive.AutoDraft().confidence,
                        help='the "auto" entry\'s confidence threshold on q(d) (0: none)')
    parser.add_argument("--auto_draft_cost", type=parse_draft_costs,
                        default=[adaptive.AutoDraft().draft_cost],
                        help='the "auto" entry\'s horizon schedule: a number c >= 0 (the '
                             "walltime formula's best horizon for each row's running overlap, "
                             "c the cost of one more draft position over a round's) or hf "
                             "(Hugging Face's +2/-1 schedule); several, comma-separated, "
                             'time one "auto" entry each, side by side (default: '
                             f"{adaptive.AutoDraft().draft_cost})")
    cli.add_bool(parser, "auto_fallback", adaptive.AutoDraft().fallback,
                 'let the "auto" entry run autoregressive decoding where that measured '
                 "faster (off: always adaptive speculation)")
    parser.add_argument("--acceptance", default=acceptance_lib.EXACT, type=parse_acceptances,
                        help="comma-separated verification rules, each timed at every k: "
                             "exact (distribution-preserving), typical (Medusa's typical "
                             "acceptance, an opt-in that is NOT distribution-preserving "
                             "above temperature 0; its records say so)")
    parser.add_argument("--typical_epsilon", type=float,
                        default=acceptance_lib.TYPICAL_EPSILON,
                        help="typical acceptance's hard threshold, in (0, 1]")
    parser.add_argument("--typical_delta", type=float, default=acceptance_lib.TYPICAL_DELTA,
                        help="typical acceptance's entropy-threshold factor, > 0")
    cli.add_bool(parser, "fixed_costs", False,
                 "also time every mode with max_new_tokens = 1 and split its time into "
                 "per-call fixed costs and loop iterations (the decode_* fields); doubles "
                 "the compiled programs, so keep to a few k per run")
    return parser.parse_args(argv)


def jit_compile(args) -> Optional[bool]:
    """The `tfspec.generate(jit_compile=...)` value of the parsed flags."""
    return None if getattr(args, "eager", False) else True


def print_and_write(args, records: List[dict], columns: Sequence[str]) -> None:
    """Prints `records` as a table and writes them to --json with the pair's settings (the
    flags of `add_pair_args`): what the pair benchmarks that take no flags of their own in
    the JSON (`bench.live_width`, `bench.auto_overhead`) write."""
    timing.print_table(records, columns)
    timing.write_json(args.json, {
        "target": args.target, "draft": args.draft, "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
        "weights_frozen": args.freeze_weights, "machine": platform.machine(),
        "records": records})


def _real_tokens(gens) -> int:
    return int(sum(np.sum(gen.lengths) for gen in gens))


def loop_steps(gens) -> int:
    """Loop iterations of a timed call's `Generation`s: each loop runs until its slowest row
    finishes, one iteration per round (or step) of that row."""
    return max(1, sum(int(np.max(gen.stats.rounds)) for gen in gens))


def _alpha(beta: float, acceptance: float) -> float:
    """beta_mean clipped into [0, 1] (float round-off); the acceptance rate if beta is nan."""
    a = beta if math.isfinite(beta) else acceptance
    return float(min(1.0, max(0.0, a))) if math.isfinite(a) else float("nan")


def per_row_acceptance(stats) -> List[float]:
    """accepted / drafted of each row (nan for a row that drafted nothing)."""
    drafted = stats.drafted.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(drafted > 0, stats.accepted / np.maximum(drafted, 1), np.nan)
    return [float(r) for r in rates]


def measure(target, draft, batches: Sequence[Sequence[Sequence[int]]], ks: Sequence[int],
            sampling: tfspec.Sampling, max_new_tokens: int, repeats: int, seed: int = 0,
            eos_id="target", jit_compile: Optional[bool] = True,
            fixed_costs: bool = False,
            auto=None,
            acceptances: Sequence[str] = (acceptance_lib.EXACT,),
            typical: Optional[acceptance_lib.TypicalAcceptance] = None) -> List[dict]:
    """Times target AR, draft AR and speculative decoding at every k over `batches`.

    Each timed call decodes every batch of `batches` (one `generate` call per batch, all of
    one size), so a batch-1 measurement covers the whole prompt pool, not one prompt.

    k may be "auto" (`tfspec.generate(k=auto)` for `auto`: an `AutoDraft`, default
    `AutoDraft()`, or a list of them, each timed as an entry of its own; their controllers
    reset first, so that their exploration, both modes measured, falls into the first
    repeats: the median of 3 repeats still holds it, of 7 it is past it). With
    `fixed_costs` its one-iteration calls speculate under a controller of their own
    (`fallback=False`), so that its fixed part is the speculative one and the timed
    calls' controller learns only from their requests. Its record's predicted fields are
    nan (no fixed k), its round fields use the mean drafts per round, and it adds
    `auto_draft_cost` (its `AutoDraft.draft_cost`), `auto_speculative_fraction` (share of
    its calls that ran speculatively) and `mean_drafts_per_round`.

    `acceptances`: the verification rules to time, each at every k ("exact"; "typical" =
    `typical`, default `tfspec.TypicalAcceptance()`, not distribution-preserving above T = 0).

    Returns:
      One record per (acceptance, k) (see the module docstring for the keys), plus `k,
      acceptance, distribution_preserving, batch_size,
      temperature, top_k, top_p, tokens_ar, tokens_spec, rounds, mean_tokens_per_round,
      draft_ms_per_step, target_ms_per_step, per_row_acceptance` (those two per step include
      the fixed costs; the decode fields of the module docstring leave them out).
    """
    batches = [[list(p) for p in prompts] for prompts in batches]
    if AUTO in ks:
        adaptive.reset()
    autos = auto_variants(auto)
    alone = bench_models.draft_alone(draft, target)  # A feature draft: its alone() model.

    rules = {acceptance_lib.EXACT: acceptance_lib.EXACT,
             acceptance_lib.TYPICAL: typical or acceptance_lib.TypicalAcceptance()}
    # An AUTO entry of ks becomes one entry per `AutoDraft` variant.
    entries = [(variant, rule) for rule in acceptances for k in ks
               for variant in (autos if k == AUTO else [k])]

    def speculating(k):
        # An auto entry's one-iteration calls must speculate (their time is the speculative
        # fixed part) and must not teach the timed calls' controller from 1-token requests
        # that are not the workload's: without the fallback, the `AutoDraft` differs, and
        # so does its controller (`adaptive.controller`).
        if isinstance(k, adaptive.AutoDraft):
            return dataclasses.replace(k, fallback=False)
        return k

    def call(model, k, d=None, new_tokens=max_new_tokens, rule=acceptance_lib.EXACT):
        return decode_fn(model, batches, k, sampling, new_tokens, seed,
                         draft=d, eos_id=eos_id, jit_compile=jit_compile,
                         acceptance=rules[rule])

    fns = ([call(target, 0), call(alone, 0)]
           + [call(target, k, draft, rule=rule) for k, rule in entries])
    # The same calls stopped after one loop iteration: they split each time into fixed and
    # per-iteration parts (see the module docstring).
    first_fns = ([call(target, 0, new_tokens=1), call(alone, 0, new_tokens=1)]
                 + [call(target, speculating(k), draft, new_tokens=1, rule=rule)
                    for k, rule in entries]
                 if fixed_costs else [])
    all_times, all_gens = timing.interleaved_runs(fns + first_fns, repeats)
    times, gens = all_times[:len(fns)], all_gens[:len(fns)]
    nan = float("nan")
    phases = ([split_phases(full, one, loop_steps(full_gens), len(batches))
               for full, one, full_gens in zip(times, all_times[len(fns):], gens)]
              if fixed_costs else [(nan, nan)] * len(fns))
    return records_from_runs([k for k, _ in entries], batches, sampling, times, gens, phases,
                             acceptances=[rule for _, rule in entries])


def auto_variants(auto) -> List[adaptive.AutoDraft]:
    """The "auto" entries' settings: `auto` (an `AutoDraft`, or a sequence of them) as a
    list; None: [AutoDraft()]."""
    if auto is None:
        return [adaptive.AutoDraft()]
    if isinstance(auto, adaptive.AutoDraft):
        return [auto]
    return list(auto)


def decode_fn(model, batches: Sequence[Sequence[Sequence[int]]], k, sampling: tfspec.Sampling,
              max_new_tokens: int, seed: int = 0, draft=None, eos_id="target",
              jit_compile: Optional[bool] = True, acceptance=acceptance_lib.EXACT):
    """A callable that decodes every batch of `batches` with `model` (one `tfspec.generate`
    call per batch) and returns their `Generation`s: what one timed call of the benchmarks
    runs. k: 0 (autoregressive), an int >= 1 or an `adaptive.AutoDraft` (with `draft`);
    `eos_id` "target": the target's; `acceptance` as `tfspec.generate` takes it (speculative
    calls only)."""
    kwargs = {} if eos_id == "target" else {"eos_id": eos_id}
    if draft is not None and acceptance != acceptance_lib.EXACT:
        kwargs["acceptance"] = acceptance
    kwargs["jit_compile"] = jit_compile  # Tests pass None (eager): no compile time.
    return lambda: [tfspec.generate(model, prompts, draft=draft, k=k, sampling=sampling,
                                    max_new_tokens=max_new_tokens, seed=seed, **kwargs)
                    for prompts in batches]


def records_from_runs(ks: Sequence, batches: Sequence[Sequence[Sequence[int]]],
                      sampling: tfspec.Sampling, times: Sequence[float], gens: Sequence,
                      phases: Optional[Sequence[tuple]] = None,
                      acceptances: Optional[Sequence[str]] = None) -> List[dict]:
    """The records of `measure` from its timed calls.

    Args:
      ks: the draft lengths (ints, or `AutoDraft`s; AUTO: the default `AutoDraft()`).
      batches: the prompt batches every call decoded.
      sampling: the calls' sampling.
      times, gens: median seconds and last results of [target autoregressive, draft alone,
        speculative at ks[0], ks[1], ...] (`timing.interleaved_runs` of `decode_fn`s).
      phases: (per-iteration s, fixed s) of each of them (`split_phases`), or None (nan).
      acceptances: the rule of each speculative call ("exact" or "typical"); None: exact.
    """
    nan = float("nan")
    phases = list(phases) if phases is not None else [(nan, nan)] * len(times)
    ar_time, draft_time = times[0], times[1]
    ar_gen, draft_gen = gens[0], gens[1]
    (target_step_s, ar_fixed_s), (draft_step_s, _) = phases[0], phases[1]
    decode_ar_ms = 1e3 * target_step_s * loop_steps(ar_gen) / max(1, _real_tokens(ar_gen))
    ar_ms = 1e3 * ar_time / max(1, _real_tokens(ar_gen))
    target_step = ar_time / loop_steps(ar_gen)
    draft_step = draft_time / loop_steps(draft_gen)
    c = walltime.draft_cost_ratio(draft_step, target_step)
    records = []
    acceptances = list(acceptances or [acceptance_lib.EXACT] * len(ks))
    # Every exact mode samples the target's distribution, so their token counts estimate
    # one mean; pooled, it is the request length `matched_speedup` compares at.
    exact_gens = [ar_gen] + [g for g, rule in zip(gens[2:], acceptances)
                             if rule == acceptance_lib.EXACT]
    pooled_tokens = float(np.mean([_real_tokens(g) for g in exact_gens]))
    for k, rule, spec_time, spec_gens, (round_s, spec_fixed_s) in zip(
            ks, acceptances, times[2:], gens[2:], phases[2:]):
        stats = tfspec.DecodeStats.concatenate([gen.stats for gen in spec_gens])
        spec_ms = 1e3 * spec_time / max(1, _real_tokens(spec_gens))
        a = _alpha(stats.beta_mean, stats.acceptance_rate)
        speculative_rounds = int(np.sum(stats.rounds[stats.drafted > 0]))
        drafts_per_round = (float(np.sum(stats.drafted)) / speculative_rounds
                            if speculative_rounds else float("nan"))
        auto = k == AUTO or isinstance(k, adaptive.AutoDraft)
        if k == AUTO:
            k = adaptive.AutoDraft()
        predicted = nan if auto else _formula_or_nan(a, k, c)
        speedup = ar_ms / spec_ms
        formula_round_s = (drafts_per_round if auto else k) * draft_step_s + target_step_s
        decode_spec_ms = (1e3 * round_s * loop_steps(spec_gens)
                          / max(1, _real_tokens(spec_gens)))
        decode_speedup = ratio(decode_ar_ms, decode_spec_ms)
        # AR time per request over the speculative call's fixed part: the speed-up left if
        # every round were free.
        ceiling = ratio(ar_time / len(batches), spec_fixed_s)
        matched = matched_speedup(
            (ar_fixed_s, target_step_s, loop_steps(ar_gen), _real_tokens(ar_gen)),
            (spec_fixed_s, round_s, loop_steps(spec_gens), _real_tokens(spec_gens)),
            pooled_tokens / len(batches))
        decode_predicted = (nan if auto else
                            _formula_or_nan(a, k, ratio(draft_step_s, target_step_s)))
        modes = [gen.mode for gen in spec_gens]
        records.append({
            "k": AUTO if auto else int(k), "acceptance": rule,
            "distribution_preserving": rule == acceptance_lib.EXACT,
            "batch_size": len(batches[0]), "num_batches": len(batches),
            "temperature": sampling.temperature,
            "top_k": sampling.top_k, "top_p": sampling.top_p,
            "ar_ms_per_token": ar_ms, "spec_ms_per_token": spec_ms, "speedup": speedup,
            "acceptance_rate": stats.acceptance_rate, "beta_mean": stats.beta_mean,
            "draft_cost_ratio": c, "predicted_speedup": predicted,
            "speedup_over_predicted": ratio(speedup, predicted),
            "tokens_ar": _real_tokens(ar_gen), "tokens_spec": _real_tokens(spec_gens),
            "rounds": int(np.sum(stats.rounds)),
            "mean_tokens_per_round": stats.mean_tokens_per_round,
            "target_ms_per_step": 1e3 * target_step, "draft_ms_per_step": 1e3 * draft_step,
            "per_row_acceptance": per_row_acceptance(stats),
            "ar_fixed_ms": 1e3 * ar_fixed_s, "spec_fixed_ms": 1e3 * spec_fixed_s,
            "target_step_ms": 1e3 * target_step_s, "draft_step_ms": 1e3 * draft_step_s,
            "round_ms": 1e3 * round_s, "formula_round_ms": 1e3 * formula_round_s,
            "round_over_formula": ratio(round_s, formula_round_s),
            "decode_speedup": decode_speedup,
            "decode_predicted_speedup": decode_predicted,
            "decode_over_predicted": ratio(decode_speedup, decode_predicted),
            "speedup_ceiling": ceiling,
            "matched_speedup": matched,
            "mean_drafts_per_round": drafts_per_round,
            "auto_draft_cost": k.draft_cost if auto else None,
            "auto_speculative_fraction": (modes.count(adaptive.SPECULATIVE) / len(modes)
                                          if auto else nan),
        })
    return records


def matched_speedup(ar: tuple, spec: tuple, tokens_per_call: float) -> float:
    """The speed-up of requests of one length: AR over speculative seconds per call at
    `tokens_per_call`, each mode's time being its fixed part plus its iterations per token x
    that length x its per-iteration time.

    At temperature > 0 every mode samples answers of its own lengths, and with a fixed part
    of ~20 ms per request a mode that happened to sample longer answers shows fewer ms per
    token: the plain `speedup` then partly measures lengths (a run at T = 1 had 425 tokens at
    k = 1 against 326 autoregressive, and k = 1 read 1.23x). Greedy modes emit the same
    tokens, so there both agree up to the split's noise.

    Args:
      ar, spec: (fixed seconds per call, seconds per iteration, iterations, tokens) of the
        mode (`split_phases`; iterations and tokens summed over the calls).
      tokens_per_call: the request length to compare at.

    Returns:
      The ratio, or nan without a split.
    """
    def seconds(fixed_s, iteration_s, iterations, tokens):
        return fixed_s + tokens_per_call * iterations / max(1, tokens) * iteration_s
    return ratio(seconds(*ar), seconds(*spec))


def split_phases(full_s: float, one_s: float, iterations: int, calls: int) -> tuple:
    """(per-iteration seconds, per-call fixed seconds) of a mode from two timings.

    Args:
      full_s: the timed run: `calls` generate calls, `iterations` loop iterations in all.
      one_s: the same calls with max_new_tokens = 1 (one iteration each).
      iterations, calls: as above.

    Solves full_s = calls F + iterations I and one_s = calls F + calls I; both are nan when
    the run had no more iterations than calls (nothing to tell them apart).
    """
    if iterations <= calls:
        return float("nan"), float("nan")
    per_iteration = (full_s - one_s) / (iterations - calls)
    return per_iteration, one_s / calls - per_iteration


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, or nan when either is not finite or the denominator <= 0."""
    if not (math.isfinite(numerator) and math.isfinite(denominator)) or denominator <= 0:
        return float("nan")
    return numerator / denominator


def _formula_or_nan(a: float, k: int, c: float) -> float:
    if not (math.isfinite(a) and math.isfinite(c)) or c < 0:
        return float("nan")
    return walltime.predicted_speedup(a, k, c)


def run(target, draft, prompt_pool: Sequence[Sequence[int]], ks: Sequence[int],
        batch_sizes: Sequence[int] = (1,), temperatures: Sequence[float] = (0.0,),
        top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3,
        seed: int = 0, target_spec: Optional[str] = None,
        draft_spec: Optional[str] = None, jit_compile: Optional[bool] = True,
        fixed_costs: bool = False, auto=None,
        acceptances: Sequence[str] = (acceptance_lib.EXACT,),
        typical: Optional[acceptance_lib.TypicalAcceptance] = None) -> dict:
    """Records for every (k, batch_size, temperature); see the module docstring."""
    records = []
    for batch_size in batch_sizes:
        batches = bench_models.batches_of(list(prompt_pool), batch_size)
        for temperature in temperatures:
            sampling = tfspec.Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
            records += measure(target, draft, batches, ks, sampling, max_new_tokens, repeats,
                               seed, jit_compile=jit_compile, fixed_costs=fixed_costs,
                               auto=auto, acceptances=acceptances, typical=typical)
    autos = auto_variants(auto)
    return {"target": target_spec, "draft": draft_spec,
            "draft_kind": bench_models.draft_kind(draft), "max_new_tokens": max_new_tokens,
            # The settings the "auto" entries share; each record has its own draft cost.
            "auto": {"k_max": autos[0].k_max, "confidence": autos[0].confidence,
                     "draft_cost": [a.draft_cost for a in autos],
                     "fallback": autos[0].fallback, "revisit": autos[0].revisit},
            "acceptances": list(acceptances),
            "typical": (None if acceptance_lib.TYPICAL not in acceptances else
                        acceptance_lib.describe(typical or acceptance_lib.TYPICAL)),
            "repeats": repeats, "seed": seed, "fixed_costs": fixed_costs,
            "weights_frozen": frozen.is_frozen(target),
            "machine": platform.processor() or platform.machine(), "records": records}


def memory_map_note(pool: Sequence[Sequence[int]], args) -> Optional[str]:
    """`evals.memory_maps.memory_map_note` for the programs this run compiles: one per mode
    (autoregressive, each k and acceptance rule, each auto schedule), temperature, batch
    size and prompt bucket, twice with --fixed_costs (a second request length)."""
    modes = 1 + len(args.k) * len(args.acceptance) + (len(args.auto_draft_cost) - 1) * any(
        k == AUTO for k in args.k)
    buckets = len({generation.prompt_bucket(len(p) or 1) for p in pool})
    programs = (modes * len(_floats(args.temperature)) * len(_ints(args.batch_size)) * buckets
                * (2 if args.fixed_costs else 1))
    return memory_maps.memory_map_note(programs)


def main(argv=None):
    args = _parse_args(argv)
    try:
        auto = [adaptive.AutoDraft(k_max=args.auto_k_max, confidence=args.auto_confidence,
                                   draft_cost=cost, fallback=args.auto_fallback)
                for cost in args.auto_draft_cost]
        typical = tfspec.TypicalAcceptance(epsilon=args.typical_epsilon,
                                           delta=args.typical_delta)
    except ValueError as error:
        message = str(error).replace("TypicalAcceptance epsilon", "--typical_epsilon").replace(
            "TypicalAcceptance delta", "--typical_delta")
        raise SystemExit(cli.usage_error("python -m bench.speedup", message)) from None
    with bench_models.exit_on_input_error():
        target, draft, pool = load_pair_and_prompts(args)
    note = memory_map_note(pool, args)
    if note:
        print(f"note: {note}", file=sys.stderr)
    result = run(target, draft, pool, args.k, _ints(args.batch_size),
                 _floats(args.temperature), args.top_k, args.top_p, args.max_new_tokens,
                 args.repeats, args.seed, args.target, args.draft, jit_compile(args),
                 args.fixed_costs, auto, args.acceptance, typical)
    result["prompts"] = args.prompts  # None: the built-in pool.
    timing.print_table(result["records"], COLUMNS)
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
