"""Draft kinds side by side: a T5 draft, a feature draft, Medusa heads, NGram and PromptLookup.

For one target (default the embedded zoo:tiny-code-target) at batch 1 on the held-out prompt
pool, each temperature is one interleaved run (`timing.interleaved_runs`, as in
bench.speedup: every repeat runs each of these calls in turn, so a slow spell of a shared
machine hits all of them alike):

    the target autoregressively (k = 0): the baseline every kind is compared with
    each draft kind decoding alone (k = 0): its c
    speculative decoding with each draft kind at each --k

Draft kinds (--kinds, default all five):

    t5             --draft SPEC (default zoo:tiny-code-draft): a T5 draft; one with a
                   target-encoder adapter (`T5.attach_target_encoder`, as the zoo draft has
                   for the embedded target) reads the target's encoder output
    t5_own_encoder the same --draft with its adapter detached: it runs its own encoder
                   (not in the default kinds; skipped with a note for a draft without an
                   adapter, which would be kind t5 again)
    feature        --feature_draft SPEC (default zoo:tiny-code-eagle): an EAGLE-style
                   `tfspec.models.FeatureDraft` that reads the target's features (no encoder,
                   embedding or LM head of its own). It cannot decode alone, so its c is timed
                   through `alone()`: the target's encoder, then the draft fed its own
                   predicted features. A zoo: SPEC that is not in tfspec/zoo/ yet is skipped
                   with a note (the JSON's `kinds` and the printed table say so); any other
                   SPEC that cannot be loaded, or a feature draft trained for another target,
                   stops with a one-line error (exit status 2)
    medusa         --medusa SPEC (default zoo:tiny-code-medusa): `tfspec.models.MedusaHeads`,
                   k heads on the target's final decoder state that propose a round's drafts
                   in one call (no draft steps), verified by the exact rule; timed alone
                   through `alone()` like a feature draft, skipped with a note when the zoo
                   entry is missing
    ngram          --ngram SPEC (default ngram:unigram: the random unigram NGram the other
                   benchmarks use as a near-free draft: c near 0, acceptance near 1/V)
    prompt_lookup  `tfspec.models.PromptLookup(max_ngram=--prompt_lookup_ngram)`: copies what
                   followed the latest earlier match of the suffix in prompt ++ output

One record per (kind, temperature, k) with the bench.speedup fields (`ar_ms_per_token,
spec_ms_per_token, speedup, acceptance_rate, beta_mean, draft_cost_ratio,
predicted_speedup, speedup_over_predicted`, `tokens_*`, `*_ms_per_step`, ...; see
bench/speedup.py), plus

    kind, draft          the kind and its SPEC
    identical_to_ar      at temperature 0: whether every prompt's greedy tokens equal the
                         autoregressive ones, row by row (exactness: they must); None at T > 0
    rows_differing       at temperature 0: how many prompts differ (0 when identical)

and a summary per (kind, temperature): the best k by speed-up, that speed-up, its beta_mean,
acceptance rate, c and `step_cost_ratio`, printed as a markdown table (one row per kind, one
group of columns per temperature) after the full table of records. At T > 0 every
speculative call is also timed stopped after one round (below), which gives each record
bench.speedup's `matched_speedup`, the speed-up at one request length, and the best k is the
best by it: sampled modes draw answers of other lengths (a run had 154 tokens at k = 2
against 326 autoregressive), which the plain ratio partly measures.

c (`draft_cost_ratio`) compares whole requests per loop step, so a draft that decodes alone
behind the target's encoder (feature drafts, Medusa heads: `alone()`) is charged that encoder
over its few steps. The target and every draft alone are therefore also timed, interleaved
with the rest, stopped after one step (max_new_tokens = 1), which splits each time into a
per-request and a per-step part (bench.speedup's --fixed_costs method): the records'
`target_step_ms` and `draft_step_ms`, and the summary's

    step_cost_ratio      draft_step_ms / target_step_ms: what one draft step costs in the
                         loop, in target steps (nan when the run is too short to split)

    python -m bench.draft_kinds --json bench/results/draft_kinds.json
    python -m bench.draft_kinds --kinds t5,prompt_lookup --k 2,4 --temperature 0
    python -m bench.draft_kinds --feature_draft runs/eagle/export --repeats 5
    python -m bench.draft_kinds --prompts my_prompts.jsonl --num_prompts 16

--prompts FILE decodes your prompts instead of the built-in held-out pool (JSONL of
{"prompt": text} lines, tokenized with the target's tokenizer; --num_prompts N takes its
first N), as in bench.speedup.

Every (model, k, temperature, prompt bucket) is one compiled loop: all four kinds at the
default four k and two temperatures are 42 per prompt bucket, about what one bench.speedup
process compiled when it ran out of memory maps in LLVM's JIT here (vm.max_map_count 65530,
see bench/speedup.py). If that happens, run the temperatures (or the kinds) in separate
runs: the speed-ups compare within a run, not across runs.

JSON: {"records": [...], "summary": [...], "kinds": [{kind, draft, class, skipped}],
"markdown": the table, plus the settings}.
"""

import argparse
import math
import platform
from typing import Dict, List, Optional, Sequence

import tfspec
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from evals.report import draft_kinds as report_draft_kinds
from tfspec import checkpoints

PROG = "python -m bench.draft_kinds"
T5, FEATURE, MEDUSA, NGRAM, PROMPT_LOOKUP = "t5", "feature", "medusa", "ngram", "prompt_lookup"
T5_OWN_ENCODER = "t5_own_encoder"
KINDS = (T5, FEATURE, MEDUSA, NGRAM, PROMPT_LOOKUP)
ALL_KINDS = KINDS + (T5_OWN_ENCODER,)  # --kinds may name these; KINDS is the default
TARGET_FEATURE_KINDS = (FEATURE, MEDUSA)  # Drafts that read the target's features.
DEFAULT_MEDUSA = "zoo:tiny-code-medusa"
_RECIPES = {FEATURE: "configs/zoo_tiny_code_eagle.py",
            MEDUSA: "configs/zoo_tiny_code_medusa.py"}
DEFAULT_NGRAM = "ngram:unigram"

COLUMNS = ["kind", "temperature", "k", "ar_ms_per_token", "spec_ms_per_token", "speedup",
           "acceptance_rate", "beta_mean", "draft_cost_ratio", "predicted_speedup",
           "identical_to_ar"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _parse_kinds(text: str) -> List[str]:
    kinds = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in kinds if x not in ALL_KINDS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"--kinds takes a comma-separated subset of "
                                         f"{','.join(ALL_KINDS)}, got {text!r}")
    return list(dict.fromkeys(kinds))


def _parse_int_ks(text: str) -> List[int]:
    ks = speedup_lib.parse_ks(text)
    if speedup_lib.AUTO in ks:
        raise argparse.ArgumentTypeError('--k takes integers >= 1 here (no "auto"; see '
                                         "bench.speedup for k=auto)")
    return list(dict.fromkeys(ks))


def _parse_temperatures(text: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise argparse.ArgumentTypeError(f"--temperature takes comma-separated numbers >= 0, "
                                         f"got {text!r}")
    return list(dict.fromkeys(values))


def _parse_args(argv=None):
    parser = cli.ArgumentParser(PROG, __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    for action in parser._actions:  # pylint: disable=protected-access
        if action.dest == "draft":
            action.help = "the T5 draft (kind t5), a bench/models.py SPEC"
    parser.add_argument("--feature_draft", default=bench_models.DEFAULT_FEATURE_DRAFT,
                        metavar="SPEC",
                        help="the feature draft (kind feature): a tfspec.load_model SPEC of a "
                             "FeatureDraft trained for --target; a zoo: name not in "
                             "tfspec/zoo/ is skipped with a note")
    parser.add_argument("--medusa", default=DEFAULT_MEDUSA, metavar="SPEC",
                        help="the Medusa heads (kind medusa): a tfspec.load_model SPEC of "
                             "MedusaHeads trained for --target; a zoo: name not in "
                             "tfspec/zoo/ is skipped with a note")
    parser.add_argument("--ngram", default=DEFAULT_NGRAM, metavar="SPEC",
                        help="the NGram draft (kind ngram), a bench/models.py SPEC")
    parser.add_argument("--prompt_lookup_ngram", type=_positive_int,
                        default=bench_models.DEFAULT_PROMPT_LOOKUP_NGRAM,
                        help="max_ngram of the PromptLookup draft (kind prompt_lookup)")
    parser.add_argument("--kinds", type=_parse_kinds, default=",".join(KINDS),
                        help="comma-separated draft kinds to compare")
    parser.add_argument("--k", type=_parse_int_ks, default="1,2,3,4",
                        help="comma-separated draft lengths (integers >= 1)")
    parser.add_argument("--temperature", type=_parse_temperatures, default="0,1",
                        help="comma-separated temperatures, one interleaved run each; at 0 "
                             "the greedy tokens are compared with autoregressive ones")
    args = parser.parse_args(argv)
    for temperature in args.temperature:
        try:
            tfspec.Sampling(temperature=temperature, top_k=args.top_k, top_p=args.top_p)
        except ValueError as e:
            parser.error(str(e))
    if args.max_new_tokens < 1 or args.repeats < 1:
        parser.error("--max_new_tokens and --repeats must be at least 1")
    return args


# ------------------------------------------------------------------------------- models


def _missing_zoo_entry(spec: str) -> Optional[str]:
    """The name of a "zoo:NAME" SPEC that is not shipped (yet), else None."""
    spec = str(spec)
    if not spec.startswith("zoo:"):
        return None
    name = spec[len("zoo:"):]
    return None if name in checkpoints.zoo_names() else name


def load_drafts(target, target_spec: str, kinds: Sequence[str], draft_spec: str,
                feature_spec: str, ngram_spec: str, prompt_lookup_ngram: int,
                dtype: Optional[str] = None, medusa_spec: str = DEFAULT_MEDUSA) -> tuple:
    """({kind: (SPEC, draft)} of the kinds that load, [{kind, draft, class, skipped}]).

    Raises:
      bench_models.ModelError: a SPEC that cannot be loaded, a draft of the wrong kind for
        its flag, a vocabulary that is not the target's, or a feature draft trained for
        another target (one line).
    """
    specs = {T5: (draft_spec, "--draft"), T5_OWN_ENCODER: (draft_spec, "--draft"),
             FEATURE: (feature_spec, "--feature_draft"),
             MEDUSA: (medusa_spec, "--medusa"), NGRAM: (ngram_spec, "--ngram"),
             PROMPT_LOOKUP: (f"{bench_models.PROMPT_LOOKUP}:{prompt_lookup_ngram}",
                             "--prompt_lookup_ngram")}
    drafts, described = {}, []
    for seed, kind in enumerate(kinds, start=1):
        spec, flag = specs[kind]
        entry = {"kind": kind, "draft": spec, "class": None, "skipped": None}
        described.append(entry)
        missing = _missing_zoo_entry(spec) if kind in TARGET_FEATURE_KINDS else None
        if missing:
            entry["skipped"] = (f"{spec} is not in tfspec/zoo/ yet (train and export it: "
                                f"{_RECIPES[kind]}), or pass {flag} DIR")
            continue
        draft = bench_models.load_spec(spec, flag, dtype=dtype, seed=seed,
                                       vocab_size=target.vocab_size)
        is_medusa = isinstance(draft, tfspec.models.MedusaHeads)
        if kind == MEDUSA and not is_medusa:
            raise bench_models.ModelError(
                f"--medusa {spec} is not a set of Medusa heads (a {type(draft).__name__})")
        if kind == FEATURE and (is_medusa or not bench_models.is_feature_draft(draft)):
            raise bench_models.ModelError(
                f"--feature_draft {spec} is not a feature draft (a {type(draft).__name__}); "
                f"pass {'Medusa heads as --medusa' if is_medusa else 'a T5 draft as --draft'}")
        if kind not in TARGET_FEATURE_KINDS and bench_models.is_feature_draft(draft):
            raise bench_models.ModelError(
                f"{flag} {spec} is {'a set of Medusa heads' if is_medusa else 'a feature draft'}"
                f"; pass it as {'--medusa' if is_medusa else '--feature_draft'}")
        if draft.vocab_size != target.vocab_size:
            raise bench_models.ModelError(
                f"target and draft must share the vocabulary: --target {target_spec} has "
                f"vocab_size {target.vocab_size}, {flag} {spec} has vocab_size "
                f"{draft.vocab_size}")
        if kind == T5_OWN_ENCODER:
            if not getattr(draft, "reads_target_encoder", False):
                entry["skipped"] = (f"{spec} has no target-encoder adapter, so it already "
                                    "runs its own encoder: kind t5")
                continue
            draft.detach_target_encoder()
        drafts[kind] = (spec, bench_models.bind_draft(target, draft, spec, target_spec, flag))
        entry["class"] = type(draft).__name__
    return drafts, described


def load_all(args) -> tuple:
    """(target, {kind: (SPEC, draft)}, kinds described, prompt pool) of the parsed flags
    (the models frozen unless --nofreeze_weights); a bad --prompts file fails before any
    model is loaded, and a --k that a draft cannot draft (more than a Medusa draft's heads)
    before any decoding.

    Raises:
      bench_models.PromptsError, bench_models.ModelError: bad input (one line).
    """
    if args.prompts:
        bench_models.read_prompts_file(args.prompts, args.num_prompts)
    target = bench_models.load_spec(args.target, "--target", dtype=args.dtype, seed=0)
    drafts, described = load_drafts(target, args.target, args.kinds, args.draft,
                                    args.feature_draft, args.ngram, args.prompt_lookup_ngram,
                                    args.dtype, medusa_spec=args.medusa)
    for kind, (spec, draft) in drafts.items():
        bench_models.check_draft_k(draft, args.k, f"draft kind {kind} ({spec})",
                                   f"lower --k or leave {kind} out of --kinds")
    if args.freeze_weights:
        tfspec.freeze_weights(target, *(draft for _, draft in drafts.values()))
    pool = bench_models.prompts(args.target, target, args.num_prompts, args.prompt_length,
                                args.seed, prompts_file=args.prompts)
    return target, drafts, described, pool


# -------------------------------------------------------------------------- measurement


def rows_differing(reference_gens, gens) -> int:
    """How many rows (over all batches) decoded other tokens than in `reference_gens`."""
    count = 0
    for reference, gen in zip(reference_gens, gens):
        for i in range(len(reference.lengths)):
            count += reference.row_tokens(i) != gen.row_tokens(i)
    return count


def measure(target, drafts: Dict[str, tuple], batches, ks: Sequence[int],
            sampling: tfspec.Sampling, max_new_tokens: int, repeats: int, seed: int = 0,
            jit_compile: Optional[bool] = True) -> List[dict]:
    """One interleaved run: the target alone, every draft alone and every (draft, k).

    Returns:
      One record per (kind, k), in the order of `drafts` then `ks` (see the module
      docstring).
    """
    batches = [[list(p) for p in prompts] for prompts in batches]

    def call(model, k=0, draft=None):
        return speedup_lib.decode_fn(model, batches, k, sampling, max_new_tokens, seed,
                                     draft=draft, jit_compile=jit_compile)

    kinds = list(drafts)
    alone = [bench_models.draft_alone(drafts[kind][1], target) for kind in kinds]
    fns = [call(target)] + [call(model) for model in alone]
    fns += [call(target, k, drafts[kind][1]) for kind in kinds for k in ks]
    # The target and every draft alone once more, stopped after one step: that splits their
    # times into per-request and per-step parts (`speedup_lib.split_phases`), so c can also
    # be read per step. A feature draft or Medusa heads decode alone behind the target's
    # encoder, which the whole-request c charges to their few steps.
    one_step = ([speedup_lib.decode_fn(model, batches, 0, sampling, 1, seed,
                                       jit_compile=jit_compile) for model in [target] + alone])
    greedy = sampling.temperature == 0
    # Sampled: every speculative call too, so each (kind, k) gets its own split and a
    # length-matched speed-up (`speedup_lib.matched_speedup`): each mode samples answers of
    # its own lengths, and the per-request part then moves its ms per token (greedy modes
    # emit the same tokens, so there both ratios agree and the calls are not doubled).
    if not greedy:
        one_step += [speedup_lib.decode_fn(target, batches, k, sampling, 1, seed,
                                           draft=drafts[kind][1], jit_compile=jit_compile)
                     for kind in kinds for k in ks]
    all_times, all_gens = timing.interleaved_runs(fns + one_step, repeats)
    times, gens = all_times[:len(fns)], all_gens[:len(fns)]
    steps = [speedup_lib.split_phases(full, one, speedup_lib.loop_steps(full_gens), len(batches))
             for full, one, full_gens in zip(times, all_times[len(fns):], gens)]
    nan = (float("nan"), float("nan"))
    records = []
    for i, kind in enumerate(kinds):
        spec_at = 1 + len(kinds) + i * len(ks)
        spec_times = times[spec_at:spec_at + len(ks)]
        spec_gens = gens[spec_at:spec_at + len(ks)]
        # Greedy speculative calls were not split (see above): no phases for them.
        spec_steps = [nan] * len(ks) if greedy else steps[spec_at:spec_at + len(ks)]
        kind_records = speedup_lib.records_from_runs(
            ks, batches, sampling, [times[0], times[1 + i], *spec_times],
            [gens[0], gens[1 + i], *spec_gens],
            phases=[steps[0], steps[1 + i]] + spec_steps)
        for record, k_gens in zip(kind_records, spec_gens):
            differing = rows_differing(gens[0], k_gens) if greedy else None
            records.append({"kind": kind, "draft": drafts[kind][0], **record,
                            "identical_to_ar": None if differing is None else differing == 0,
                            "rows_differing": differing})
    return records


def step_cost_ratio(record: dict) -> float:
    """c per step: a draft step's time over a target step's, each with its per-request part
    (encoders, call) split off (`draft_step_ms / target_step_ms`; nan when unsplittable)."""
    draft_ms = record.get("draft_step_ms", float("nan"))
    if not draft_ms > 0:  # nan, or noise larger than a step (too few steps to split).
        return float("nan")
    return speedup_lib.ratio(draft_ms, record.get("target_step_ms", float("nan")))


def summarize(records: Sequence[dict], kinds: Sequence[str],
              temperatures: Sequence[float]) -> List[dict]:
    """Per (kind, temperature): the best k by speed-up with its speed-up, beta_mean,
    acceptance rate and c; `identical_to_ar` over all ks (None at T > 0). At T > 0 the best
    k is the one with the best `matched_speedup` (one request length) where the run
    split every call, since the plain ratio there partly measures sampled lengths."""
    out = []
    for kind in kinds:
        for temperature in temperatures:
            rows = [r for r in records
                    if r["kind"] == kind and r["temperature"] == temperature]
            if not rows:
                continue
            matched = temperature > 0 and all(
                math.isfinite(r.get("matched_speedup", math.nan)) for r in rows)
            key = "matched_speedup" if matched else "speedup"
            best = max(rows, key=lambda r: r[key] if math.isfinite(r[key]) else -math.inf)
            flags = [r["identical_to_ar"] for r in rows]
            out.append({"kind": kind, "draft": best["draft"], "temperature": temperature,
                        "best_k": best["k"], "speedup": best["speedup"],
                        "matched_speedup": (best["matched_speedup"] if matched
                                            else math.nan),
                        "beta_mean": best["beta_mean"],
                        "acceptance_rate": best["acceptance_rate"],
                        "draft_cost_ratio": best["draft_cost_ratio"],
                        "step_cost_ratio": step_cost_ratio(best),
                        "ar_ms_per_token": best["ar_ms_per_token"],
                        "spec_ms_per_token": best["spec_ms_per_token"],
                        "identical_to_ar": None if None in flags else all(flags)})
    return out


def markdown_table(summary: Sequence[dict], described: Sequence[dict]) -> str:
    """One row per draft kind: per temperature its best k, speed-up, beta and c (the
    report's table, `evals.report.draft_kinds`); skipped kinds listed below the table."""
    notes = [f"- {entry['kind']}: skipped ({entry['skipped']})"
             for entry in described if entry["skipped"]]
    table = report_draft_kinds.draft_kinds_table([{"summary": list(summary)}])
    return "\n".join([table] + ([""] + notes if notes else []))


def run(target, drafts: Dict[str, tuple], prompt_pool: Sequence[Sequence[int]],
        ks: Sequence[int], temperatures: Sequence[float] = (0.0, 1.0), top_k: int = 0,
        top_p: float = 1.0, max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
        jit_compile: Optional[bool] = True, described: Optional[List[dict]] = None,
        target_spec: Optional[str] = None) -> dict:
    """Records, summary and table of every (kind, temperature, k) at batch 1."""
    batches = bench_models.batches_of(list(prompt_pool), 1)
    described = described if described is not None else [
        {"kind": kind, "draft": spec, "class": type(draft).__name__, "skipped": None}
        for kind, (spec, draft) in drafts.items()]
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
        if drafts:
            records += measure(target, drafts, batches, ks, sampling, max_new_tokens,
                               repeats, seed, jit_compile)
    summary = summarize(records, list(drafts), temperatures)
    return {"benchmark": "draft_kinds", "target": target_spec, "batch_size": 1,
            "num_prompts": len(batches), "k": list(ks), "temperatures": list(temperatures),
            "top_k": top_k, "top_p": top_p, "max_new_tokens": max_new_tokens,
            "repeats": repeats, "seed": seed, "kinds": described, "records": records,
            "summary": summary, "markdown": markdown_table(summary, described),
            "machine": platform.processor() or platform.machine()}


def main(argv=None):
    args = _parse_args(argv)
    with bench_models.exit_on_input_error():
        target, drafts, described, pool = load_all(args)
    for entry in described:
        if entry["skipped"]:
            print(f"note: draft kind {entry['kind']} skipped: {entry['skipped']}")
    result = run(target, drafts, pool, args.k, args.temperature, args.top_k, args.top_p,
                 args.max_new_tokens, args.repeats, args.seed, speedup_lib.jit_compile(args),
                 described, args.target)
    # prompts None: the built-in pool.
    result.update(prompts=args.prompts, dtype=args.dtype, weights_frozen=args.freeze_weights)
    if result["records"]:
        timing.print_table(result["records"], COLUMNS)
        print()
    print(result["markdown"])
    differing = [f"{r['kind']} k={r['k']}" for r in result["records"]
                 if r["identical_to_ar"] is False]
    if differing:
        print(f"WARNING: greedy speculative tokens differ from autoregressive ones for "
              f"{', '.join(differing)} (see rows_differing)")
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
