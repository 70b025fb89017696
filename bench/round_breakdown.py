"""Where the time of one speculative round goes: a per-round breakdown of the decoding loop.

For each (target/draft pair, batch size, k, temperature) this measures the real loop and
each part of a round timed on its own, on the same models, batch and shapes:

    round_ms            the real loop: `tfspec.generate(target, prompts, draft=draft, k=k)`
                        wall time over the whole prompt pool, minus the once-per-request
                        work (`prepare` of both models, timed as its own compiled call on
                        the same batches), divided by the loop rounds (per call the max over
                        rows of `stats.rounds`, summed over calls)
    ar_step_ms          the same for the target alone (k = 0): one autoregressive step
    draft_ar_step_ms    the same for the draft alone (k = 0)
    draft_step_ms       one draft `decode` of a 1-token window + choosing the draft token
                        (greedy: argmax; T > 0: `logits_to_probs` + `sample_categorical`)
    sample_ms           that token choice alone, on real draft logits [B, V]
    catch_up_ms         one draft `decode` of a 1-token window whose logits are discarded
                        (XLA drops the last layer's attention/FFN and the LM head)
    catch_up_fraction   fraction of rounds that run the catch-up: 1 when the loop runs it
                        every round (`catch_up_every_round`, read off the signature of
                        `decoding._draft_catch_up`: no per-row condition), else
                        catch_up_needed_fraction, the fraction of rounds in which a running
                        row accepted all k (estimated from the real run's per-row counters,
                        see `catch_up_needed_fraction`)
    verify_ms           one target `decode` of a (k + 1)-token window
    accept_ms           the rule on real logits: greedy: argmax of target [B, k+1, V] +
                        `acceptance.accept_greedy`; T > 0: `logits_to_probs` of the target
                        logits, the round's uniforms and `acceptance.accept` with the draft
                        probs [B, k, V]
    free_round_ms       one round of the real `decoding.decode_loop` driven by "free" models
                        (`FreeModel`: a fixed logits row, no network)
    commit_ms           free_round_ms - accept_ms - k * sample_ms: the commit scatter, EOS
                        and length bookkeeping, statistics, the draft buffers, random
                        streams and loop control of a round (ablation)
    unexplained_ms      round_ms - (k * draft_step_ms + catch_up_fraction * catch_up_ms
                        + verify_ms + accept_ms + commit_ms)
    verify_over_step    verify_ms / ar_step_ms: what verifying k + 1 positions costs in steps
    round_over_formula  round_ms / (k * draft_ar_step_ms + ar_step_ms): the round against the
                        walltime formula's cost model (k draft steps + one target step)
    call_overhead_ms    Python and dispatch work of one `generate` call around its compiled
                        loop (free models: generate wall time - compiled loop time);
                        call_overhead_per_round_ms spreads it over the real run's rounds.
                        Informational: it is part of unexplained_ms.

Every isolated part runs inside its own `tf.function(jit_compile=True)` holding a
`tf.while_loop` of N iterations; the per-iteration cost is the slope between N = 1 and a
calibrated N (about --component_seconds of work), so the per-call dispatch, the copy of the
inputs and the final reduction cancel. Each loop's inputs change every iteration (positions
advance, tokens are fed back, logits get a row-constant shift from the previous iteration),
so XLA cannot hoist the measured work out of the loop. The draft step, catch-up and verify
(whose cross-attention grows with the prompt) run on one batch of every prompt width (bucket)
of the pool and are weighted by the real loop's share of rounds at that width (recorded as
`prompt_widths`); the other parts run on the first batch. All timed calls of one (pair,
batch size, temperature) are interleaved (see `bench.timing.interleaved_runs`), after one
untimed warm-up each. On a shared machine round_ms is the noisiest number: the prepare time
it subtracts (the encoders over the padded prompt) can exceed the loop's own time per call.

    python -m bench.round_breakdown                          # embedded + t5-base, B 1 and 8
    python -m bench.round_breakdown --pairs embedded --batch_sizes 1 --k 4 \\
        --temperature 0,1 --repeats 2 --json runs/bench/round_breakdown.json
    python -m bench.round_breakdown --target random:t5-small \\
        --draft random:t5-small:num_layers=1 --k 2,4 --max_new_tokens 32
    python -m bench.round_breakdown --pairs embedded --prompts my_prompts.jsonl

Pairs: `embedded` = zoo:tiny-code-target / zoo:tiny-code-draft on held-out code prompts;
`t5-base` = random:t5-base target with a random:t5-small draft on random prompts (shapes
only: acceptance is near zero). --target/--draft run one custom pair instead (a missing one
is the embedded pair's). --prompts FILE decodes your prompts (JSONL of {"prompt": text},
checkpoint targets only) as in bench.speedup. Bad flags exit with status 2 and one line.

JSON: {"records": [...], "method": {...}, "settings": {...}, "machine": ...}. One record per
(pair, batch_size, k, temperature) with the keys above plus `pair, target, draft, batch_size,
num_batches, k, temperature, top_k, top_p, max_new_tokens, prompt_widths, rounds, ar_rounds,
draft_ar_rounds, tokens, mean_tokens_per_round, acceptance_rate, prepare_ms,
free_rounds_per_loop, explained_ms, iterations` (the N of every isolated loop) and
`ms_by_prompt_width` (draft_step_ms, catch_up_ms, verify_ms at each prompt width before
weighting); `method` states in words how each key was measured.
"""

import argparse
import inspect
import platform
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import tfspec  # First: it keeps TensorFlow's native start-up logs quiet (tfspec.quiet).
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from bench.component_loops import (SHARED_PARTS, WIDTH_PARTS, Programs, SlopeLoop,
                                   component_loops, pad_batch, width_weights)
from evals import cli
from tfspec import decoding
from tfspec import sampling as sampling_lib

PAIRS = {
    "embedded": (bench_models.DEFAULT_TARGET, bench_models.DEFAULT_DRAFT),
    "t5-base": ("random:t5-base", "random:t5-small"),
}
DEFAULT_PAIRS = "embedded,t5-base"

COLUMNS = ["pair", "batch_size", "k", "temperature", "round_ms", "draft_step_ms",
           "catch_up_ms", "catch_up_fraction", "verify_ms", "accept_ms", "commit_ms",
           "unexplained_ms", "call_overhead_per_round_ms", "ar_step_ms", "draft_ar_step_ms",
           "verify_over_step", "round_over_formula", "acceptance_rate"]

METHOD = {
    "timing": "Every timed callable of one (pair, batch_size, temperature) runs once untimed "
              "(XLA compilation), then all run in turn --repeats times, interleaved (order "
              "reversed every other repeat); each time is the median over repeats.",
    "round_ms": "Real loop: wall time of tfspec.generate(target, batch, draft=draft, k=k) over "
                "every batch of the prompt pool, minus the prepare time of both models "
                "(prepare_ms per call), divided by the loop rounds (per call the max over "
                "rows of stats.rounds, summed over calls).",
    "ar_step_ms": "Same as round_ms for tfspec.generate(target, batch, k=0), minus the "
                  "target's prepare time.",
    "draft_ar_step_ms": "Same as round_ms for tfspec.generate(draft, batch, k=0), minus the "
                        "draft's prepare time.",
    "prepare_ms": "Once-per-request work per generate call: target.prepare + draft.prepare "
                  "(encoders, cross-attention K/V, cache allocation), each as its own "
                  "compiled call (tf.function(jit_compile=True)) on the same batches, "
                  "dispatch included.",
    "isolated_loops": "draft_step_ms, sample_ms, catch_up_ms, verify_ms, accept_ms: each part "
                      "runs in its own tf.function(jit_compile=True) holding a tf.while_loop "
                      "of N iterations; cost per iteration = slope (t(N) - t(1)) / (N - 1), "
                      "N calibrated to about --component_seconds of work (recorded in "
                      "`iterations`), so dispatch, input copies and the final reduction "
                      "cancel. Inputs change every iteration (positions advance, tokens fed "
                      "back, a row-constant shift of the logits from the previous "
                      "iteration), so XLA cannot hoist the work out of the loop. Inputs "
                      "come from the real prepare of a batch of the pool: draft_step, "
                      "catch_up and verify (cross-attention grows with the prompt) on the "
                      "first batch of every prompt width, averaged with weights = share of "
                      "the real loop's rounds at that width (`prompt_widths`); sample and "
                      "accept on the first batch.",
    "draft_step_ms": "Isolated loop: draft.decode of a 1-token window at an advancing "
                     "position, then the token choice of the loop's draft block (greedy: "
                     "argmax; T > 0: sampling.logits_to_probs + sampling.sample_categorical "
                     "with a uniform); the token is fed back. Times k per round.",
    "sample_ms": "Isolated loop: the draft block's token choice alone on real draft logits "
                 "[B, V] (greedy: argmax; T > 0: logits_to_probs + sample_categorical).",
    "catch_up_ms": "Isolated loop: draft.decode of a 1-token window whose logits are "
                   "discarded (only the cache is carried, as in decoding._draft_catch_up).",
    "catch_up_fraction": "1.0 when the loop runs the catch-up every round "
                         "(catch_up_every_round: decoding._draft_catch_up takes no per-row "
                         "condition), else catch_up_needed_fraction.",
    "catch_up_needed_fraction": "Estimated fraction of loop rounds in which some running row "
                                "accepted all k drafts: per row f = "
                                "accepted_per_position[:, k-1] / rounds; per call, each loop "
                                "round t contributes 1 - prod(1 - f_b) over the rows b still "
                                "running at t (rows independent; at batch 1 this is f); "
                                "summed over calls and divided by the loop rounds. Slightly "
                                "high: a row that accepts all k in its last round needs no "
                                "catch-up.",
    "verify_ms": "Isolated loop: target.decode of a (k+1)-token window at advancing positions; "
                 "the logits are consumed by a max over V (one read, so XLA keeps the LM "
                 "head; included).",
    "accept_ms": "Isolated loop mirroring decoding._verify after the target call, on real "
                 "logits of one verify window of the pair: greedy: argmax of target logits "
                 "[B, k+1, V] + acceptance.accept_greedy; T > 0: sampling.logits_to_probs of "
                 "the target logits, the accept and final uniforms (rng.uniform) and "
                 "acceptance.accept with the real draft probs [B, k, V] and draft ids.",
    "free_round_ms": "Ablation: the real decoding.decode_loop (same k, max_new_tokens, "
                     "sampling, EOS id) with FreeModel target and draft: decode returns one "
                     "fixed random logits row of the pair's vocabulary V (EOS at -inf, so "
                     "no row stops early) broadcast to [B, W, V] (plus row constants from "
                     "the prompt length and the position, which keep it data-dependent and "
                     "change no distribution); the cache is one int per row. Target and "
                     "draft return the SAME logits, so every draft is accepted "
                     "(full-acceptance rounds; the catch-up runs every round, at the cost "
                     "of a free decode). One whole decode_loop per iteration of an outer "
                     "compiled while loop (its seed and prompt lengths depend on the previous "
                     "iteration), slope over iterations, divided by its rounds.",
    "commit_ms": "free_round_ms - accept_ms - k * sample_ms: commit scatter, EOS/length "
                 "bookkeeping, statistics, draft id/prob buffers, the draft uniforms, the "
                 "catch-up condition if any, and loop control (free decodes included, ~0).",
    "unexplained_ms": "round_ms - (k * draft_step_ms + catch_up_fraction * catch_up_ms + "
                      "verify_ms + accept_ms + commit_ms): interactions (cache reuse, fusion "
                      "across parts), per-call overhead spread over rounds, noise.",
    "call_overhead_ms": "Per generate call: wall time of tfspec.generate with the free pair "
                        "minus one compiled free decode_loop (input checks, padding, "
                        "dispatch, numpy outputs). call_overhead_per_round_ms = "
                        "call_overhead_ms * calls / rounds of the real run; part of "
                        "unexplained_ms (round_ms already subtracts one prepare dispatch).",
    "verify_over_step": "verify_ms / ar_step_ms.",
    "round_over_formula": "round_ms / (k * draft_ar_step_ms + ar_step_ms).",
}


# ------------------------------------------------------------------------------- statistics


def catch_up_every_round() -> bool:
    """True when `decoding._draft_catch_up` takes no per-row condition (it then runs every
    round; an earlier loop ran it under a `tf.cond` only when a row needed it)."""
    # The loop's internals are what this benchmark takes apart.
    parameters = inspect.signature(decoding._draft_catch_up).parameters  # pylint: disable=W0212
    return not any("catch_up" in name or "mask" in name for name in parameters)


def catch_up_needed_fraction(stats_list: Sequence[tfspec.DecodeStats], k: int) -> float:
    """Estimated fraction of loop rounds in which some running row needs the draft catch-up.

    Per row, f = accepted_per_position[:, k - 1] / rounds is the fraction of its rounds that
    accepted all k drafts. A conditional catch-up runs when any running row needs it, so
    loop round t of a call counts 1 - prod(1 - f_b) over the rows b with rounds_b > t
    (rows taken as independent; at batch 1 this is f).

    Args:
      stats_list: `DecodeStats` of each generate call (counters [B], [B, k]).
      k: draft length (>= 1).

    Returns:
      Catch-up rounds / loop rounds over all calls (0 if there were no rounds).
    """
    catch_up_rounds, loop_rounds = 0.0, 0
    for stats in stats_list:
        rounds = np.asarray(stats.rounds, dtype=np.int64)
        full = np.asarray(stats.accepted_per_position, dtype=np.float64)[:, k - 1]
        f = np.where(rounds > 0, full / np.maximum(rounds, 1), 0.0)
        loop = int(rounds.max(initial=0))
        for t in range(loop):
            running = rounds > t
            catch_up_rounds += 1.0 - float(np.prod(1.0 - f[running]))
        loop_rounds += loop
    return catch_up_rounds / loop_rounds if loop_rounds else 0.0


def _loop_rounds(gens) -> int:
    # Each loop runs until its slowest row finishes: one iteration per round of that row.
    return max(1, sum(int(np.max(gen.stats.rounds)) for gen in gens))




def measure(programs: Programs, batches: Sequence[Sequence[Sequence[int]]],
            ks: Sequence[int], sampling: sampling_lib.Sampling, repeats: int, seed: int = 0,
            component_seconds: float = 0.2) -> List[dict]:
    """The breakdown of one (batch size, sampling) for every k.

    Args:
      programs: the pair's compiled programs (target, draft, max_new_tokens).
      batches: the prompt pool in batches of one size (token-id lists); the real runs decode
        all of them. The isolated draft step, catch-up and verify run on the first batch of
        every prompt width (bucket) among them, and are weighted by the share of the real
        loop's rounds spent at that width; the other isolated loops run on `batches[0]`.
      ks: draft lengths (>= 1).
      sampling: the `Sampling` of target and draft.
      repeats: timed, interleaved repeats after one warm-up.
      seed: request seed of generate, and of the inputs of the isolated loops.
      component_seconds: work per calibrated isolated loop call.

    Returns:
      One record per k (keys: see the module docstring).
    """
    target, draft = programs.target, programs.draft
    max_new_tokens = programs.max_new_tokens
    batches = [[list(p) for p in prompts] for prompts in batches]
    padded = [pad_batch(prompts, target.pad_id) for prompts in batches]
    widths = [int(ids.shape[1]) for ids, _ in padded]
    first_of_width = {}
    for i, width in enumerate(widths):
        first_of_width.setdefault(width, i)

    def generate(model, k, d=None):
        return lambda: [tfspec.generate(model, prompts, draft=d, k=k, sampling=sampling,
                                        max_new_tokens=max_new_tokens, seed=seed)
                        for prompts in batches]

    ar_length = max_new_tokens + 2  # decoding.LoopConfig.buffer_length at k = 0.
    fns = [("ar_target", generate(target, 0)), ("ar_draft", generate(draft, 0)),
           ("prepare_target_ar", programs.prepare_over_batches(target, ar_length, padded)),
           ("prepare_draft_ar", programs.prepare_over_batches(draft, ar_length, padded))]
    loops: Dict[Tuple[int, str, Optional[int]], SlopeLoop] = {}  # (k, part, width or None)
    free_rounds: Dict[int, int] = {}
    for k in ks:
        length = max_new_tokens + k + 2
        fns += [(f"spec{k}", generate(target, k, draft)),
                (f"prepare_target{k}", programs.prepare_over_batches(target, length, padded)),
                (f"prepare_draft{k}", programs.prepare_over_batches(draft, length, padded)),
                (f"free_generate{k}", generate(programs.free_target, k, programs.free_draft))]
        # The token choice does not depend on k: measured once, with the first k.
        shared = [n for n in SHARED_PARTS if n != "sample" or k == ks[0]]
        new_loops, free_rounds[k] = component_loops(programs, padded[0], k, sampling, seed,
                                                     shared)
        loops.update({(k, name, None): loop for name, loop in new_loops.items()})
        for width, index in first_of_width.items():
            new_loops, _ = component_loops(programs, padded[index], k, sampling, seed,
                                            WIDTH_PARTS)
            loops.update({(k, name, width): loop for name, loop in new_loops.items()})
    for loop in loops.values():
        loop.calibrate(component_seconds)
        fns += loop.fns()

    names = [name for name, _ in fns]
    times, results = timing.interleaved_runs([fn for _, fn in fns], repeats)
    times = dict(zip(names, times))
    results = dict(zip(names, results))

    ar_rounds = _loop_rounds(results["ar_target"])
    draft_ar_rounds = _loop_rounds(results["ar_draft"])
    ar_step = 1e3 * (times["ar_target"] - times["prepare_target_ar"]) / ar_rounds
    draft_ar_step = 1e3 * (times["ar_draft"] - times["prepare_draft_ar"]) / draft_ar_rounds
    sample_loop = loops[(ks[0], "sample", None)]
    sample_ms = sample_loop.per_iteration_ms(times)
    records = []
    for k in ks:
        gens = results[f"spec{k}"]
        stats = tfspec.DecodeStats.concatenate([gen.stats for gen in gens])
        rounds = _loop_rounds(gens)
        prepare_s = times[f"prepare_target{k}"] + times[f"prepare_draft{k}"]
        round_ms = 1e3 * (times[f"spec{k}"] - prepare_s) / rounds
        weights = width_weights(gens, widths)
        part = {name: loops[(k, name, None)].per_iteration_ms(times)
                for name in ("accept", "free_loop")}
        by_width = {name: {width: loops[(k, name, width)].per_iteration_ms(times)
                           for width in sorted(weights)} for name in WIDTH_PARTS}
        for name in WIDTH_PARTS:
            part[name] = sum(weights[width] * ms for width, ms in by_width[name].items())
        free_round = part["free_loop"] / max(1, free_rounds[k])
        commit = free_round - part["accept"] - k * sample_ms
        needed = catch_up_needed_fraction([gen.stats for gen in gens], k)
        every_round = catch_up_every_round()
        fraction = 1.0 if every_round else needed
        explained = (k * part["draft_step"] + fraction * part["catch_up"] + part["verify"]
                     + part["accept"] + commit)
        call_overhead = 1e3 * times[f"free_generate{k}"] / len(batches) - part["free_loop"]
        tokens = int(np.sum(stats.tokens))
        iterations = {(name if width is None else f"{name}@{width}"): loop.iterations
                      for (loop_k, name, width), loop in loops.items() if loop_k == k}
        iterations["sample"] = sample_loop.iterations
        records.append({
            "k": int(k), "batch_size": len(batches[0]), "num_batches": len(batches),
            "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "max_new_tokens": max_new_tokens,
            "prompt_widths": {str(w): weight for w, weight in sorted(weights.items())},
            "rounds": rounds, "ar_rounds": ar_rounds, "draft_ar_rounds": draft_ar_rounds,
            "tokens": tokens, "mean_tokens_per_round": tokens / rounds,
            "acceptance_rate": stats.acceptance_rate,
            "round_ms": round_ms, "ar_step_ms": ar_step, "draft_ar_step_ms": draft_ar_step,
            "prepare_ms": 1e3 * prepare_s / len(batches),
            "draft_step_ms": part["draft_step"], "sample_ms": sample_ms,
            "catch_up_ms": part["catch_up"], "catch_up_fraction": fraction,
            "catch_up_every_round": every_round, "catch_up_needed_fraction": needed,
            "verify_ms": part["verify"], "accept_ms": part["accept"],
            "free_round_ms": free_round, "free_rounds_per_loop": free_rounds[k],
            "commit_ms": commit, "explained_ms": explained,
            "unexplained_ms": round_ms - explained,
            "call_overhead_ms": call_overhead,
            "call_overhead_per_round_ms": call_overhead * len(batches) / rounds,
            "verify_over_step": part["verify"] / ar_step,
            "round_over_formula": round_ms / (k * draft_ar_step + ar_step),
            "iterations": iterations,
            "ms_by_prompt_width": {f"{name}_ms": {str(w): ms for w, ms in values.items()}
                                   for name, values in by_width.items()},
        })
    return records


def run(target, draft, prompt_pool: Sequence[Sequence[int]], ks: Sequence[int],
        batch_sizes: Sequence[int] = (1,), temperatures: Sequence[float] = (0.0,),
        top_k: int = 0, top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3,
        seed: int = 0, component_seconds: float = 0.2, pair: str = "custom",
        target_spec: Optional[str] = None, draft_spec: Optional[str] = None) -> dict:
    """Records of one pair for every (batch_size, k, temperature).

    Returns:
      {"records": [...], "method": METHOD}; every record also carries `pair`, `target` and
      `draft`.
    """
    programs = Programs(target, draft, max_new_tokens, seed)
    records = []
    for batch_size in batch_sizes:
        batches = bench_models.batches_of(list(prompt_pool), batch_size)
        for temperature in temperatures:
            sampling = tfspec.Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
            for record in measure(programs, batches, ks, sampling, repeats, seed,
                                  component_seconds):
                records.append({"pair": pair, "target": target_spec, "draft": draft_spec,
                                **record})
    return {"records": records, "method": METHOD}


# ---------------------------------------------------------------------------------- flags


def _number_list(text: str, cast, flag: str, minimum) -> list:
    try:
        values = [cast(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes a comma-separated list of {cast.__name__}s, got "
                         f"{text!r}") from None
    if not values or any(not v >= minimum for v in values):
        raise ValueError(f"{flag} values must be >= {minimum}, got {text!r}")
    return values


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.round_breakdown", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    # None: the pairs of --pairs; either flag runs one custom pair instead.
    parser.set_defaults(target=None, draft=None)
    parser.add_argument("--pairs", default=argparse.SUPPRESS,
                        help=f"comma-separated pairs among {', '.join(PAIRS)} (default: "
                             f"{DEFAULT_PAIRS}); not with --target/--draft")
    parser.add_argument("--batch_sizes", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--k", default="4", help="comma-separated draft lengths (>= 1)")
    parser.add_argument("--temperature", default="0,1", help="comma-separated temperatures")
    parser.add_argument("--component_seconds", type=float, default=0.2,
                        help="work per timed call of each isolated loop (sets its N)")
    args = parser.parse_args(argv)
    try:
        args.ks = _number_list(args.k, int, "--k", 1)
        args.batch_size_list = _number_list(args.batch_sizes, int, "--batch_sizes", 1)
        args.temperatures = _number_list(args.temperature, float, "--temperature", 0.0)
        for t in args.temperatures:
            tfspec.Sampling(temperature=t, top_k=args.top_k, top_p=args.top_p)
    except ValueError as e:
        parser.error(str(e))
    if args.max_new_tokens < 1 or args.repeats < 1:
        parser.error("--max_new_tokens and --repeats must be at least 1")
    if not args.component_seconds > 0:
        parser.error(f"--component_seconds must be > 0, got {args.component_seconds}")
    if args.eager:
        parser.error("--eager is not supported: every part is timed as a compiled XLA program")
    custom = args.target is not None or args.draft is not None
    if custom and hasattr(args, "pairs"):
        parser.error("--pairs runs named pairs, --target/--draft one custom pair; pass one")
    if custom:
        args.pair_specs = [("custom", args.target or bench_models.DEFAULT_TARGET,
                            args.draft or bench_models.DEFAULT_DRAFT)]
    else:
        names = [p.strip() for p in getattr(args, "pairs", DEFAULT_PAIRS).split(",")
                 if p.strip()]
        unknown = [p for p in names if p not in PAIRS]
        if not names or unknown:
            parser.error(f"--pairs: unknown pair {', '.join(unknown) or '(none)'}; choose "
                         f"from {', '.join(PAIRS)}")
        args.pair_specs = [(name, *PAIRS[name]) for name in names]
    if args.prompts:
        randoms = [name for name, target, _ in args.pair_specs if bench_models.is_random(target)]
        if randoms:
            parser.error(f"--prompts needs a target with a tokenizer; pair {randoms[0]} has a "
                         f"random target (use --pairs embedded or a checkpoint --target)")
    return args


def main(argv=None):
    args = _parse_args(argv)
    result = {"records": [], "method": METHOD}
    for pair, target_spec, draft_spec in args.pair_specs:
        pair_args = argparse.Namespace(**{**vars(args), "target": target_spec,
                                          "draft": draft_spec})
        with bench_models.exit_on_input_error():
            target, draft, pool = speedup_lib.load_pair_and_prompts(
                pair_args, max(args.batch_size_list))
            bench_models.require_token_draft(
                draft, draft_spec, "bench.round_breakdown",
                "its isolated loops call a token draft's decode(context, cache, ids, "
                "positions); time a feature draft's rounds with bench.speedup --fixed_costs "
                "or bench.draft_kinds")
        result["records"] += run(
            target, draft, pool, args.ks, args.batch_size_list, args.temperatures,
            args.top_k, args.top_p, args.max_new_tokens, args.repeats, args.seed,
            args.component_seconds, pair, target_spec, draft_spec)["records"]
    result["settings"] = {
        "pairs": [list(p) for p in args.pair_specs], "batch_sizes": args.batch_size_list,
        "k": args.ks, "temperature": args.temperatures, "top_k": args.top_k,
        "top_p": args.top_p, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
        "seed": args.seed, "dtype": args.dtype, "prompts": args.prompts,
        "num_prompts": args.num_prompts, "component_seconds": args.component_seconds}
    result["machine"] = platform.processor() or platform.machine()
    timing.print_table(result["records"], COLUMNS)
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main(sys.argv[1:])
