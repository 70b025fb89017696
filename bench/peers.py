"""tfspec against other implementations on the same weights and prompts (optional extras).

Side by side at batch 1, greedy, over the same prompts and the same exported weights (the
target written once with `tfspec.save_model(..., dtype="float32")`, every peer loading that
directory):

    tfspec  ar / spec                      our loop, k = 0 and k
    ctranslate2  float32 / int8            CTranslate2's `Translator` (greedy, beam 1) on the
                                           target converted from the export
                                           (bench/ctranslate2_peer.py; int8 = CTranslate2's
                                           weight quantization at load)
    keras-hub  autoregressive              keras-hub's own `T5Seq2SeqLM.generate` (greedy
                                           sampler, XLA) on a `T5Backbone` filled from the
                                           export (bench/keras_hub_peer.py)
    transformers  ar / assisted            `T5ForConditionalGeneration.generate` on the
                                           export, without and with `assistant_model=draft`
                                           (`num_assistant_tokens=k`, constant schedule)
    keras-hub  SpeculativeSampler          run when keras-hub can drive a T5 with it;
                                           otherwise the reason is printed

    ms_per_token    wall time per emitted token. tfspec, CTranslate2 and keras-hub run in this
                    process and are timed interleaved (one round-robin over all of them, so a
                    slow spell of a shared machine hits all alike); transformers runs in its
                    own process and interleaves its own two modes, so compare its ratios
                    before its absolute numbers
    tfspec_speedup_over_this        this row's ms/token over tfspec's in the same mode
                    (autoregressive against tfspec autoregressive, assisted against tfspec
                    speculative): > 1 means tfspec is faster
    tfspec_spec_speedup_over_this   this row's ms/token over tfspec speculative's
    greedy_rows_differing / greedy_tokens_differing   the row's greedy tokens against tfspec
                    autoregressive's, prompt by prompt: rows with any difference, and
                    positions that differ (a missing or extra token counts as one) out of
                    `greedy_tokens_compared`. Expected 0 for float32 peers; int8 may differ
                    (reported, not asserted)

and, for sampled decoding (temperature 1, no top-k/top-p), the exactness check:

    tv_first_token  total-variation distance between the first-token frequencies of
                    `--tv_samples` speculative samples and the target's exact softmax
    tv_noise_floor  the mean TV of that many i.i.d. draws from the exact distribution:
                    an exact sampler should score about this, a biased one clearly more

on a toy pair (`--tv_target/--tv_draft`, tiny random T5s by default).

Each peer is optional (`--peers` picks them). One that is not installed is reported as a
skipped row with the pip command that installs it; the rest still run. transformers runs in
`--hf_python` (default: this interpreter) as a subprocess (bench/_hf_peer.py), so it can live
in its own virtualenv; without torch/transformers there it prints "skipped: install
tfspec[peers]". CTranslate2 needs `pip install ctranslate2` (in tfspec[peers]); keras-hub is
a tfspec requirement.

    python -m bench.peers --k 4 --json runs/bench/peers.json
    python -m bench.peers --peers ctranslate2,keras-hub --num_prompts 2 \\
        --max_new_tokens 8 --repeats 1 --tv_samples 0
    python -m bench.peers --target random:t5-small:num_layers=2 \\
        --draft random:t5-small:num_layers=1 --hf_python /tmp/hfenv/bin/python \\
        --num_prompts 2 --max_new_tokens 16 --repeats 1 --tv_samples 200
"""

import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

import numpy as np

import tfspec
from bench import ctranslate2_peer
from bench import keras_hub_peer
from bench import models as bench_models
from bench import timing
from evals import cli

SKIP_MESSAGE = "skipped: install tfspec[peers] (torch and transformers) to compare with peers"
TINY_TV_TARGET = "random:t5-small:vocab_size=64,d_model=32,d_kv=8,d_ff=64,num_layers=2,num_heads=4"
TINY_TV_DRAFT = "random:t5-small:vocab_size=64,d_model=16,d_kv=8,d_ff=32,num_layers=1,num_heads=2"
PEERS = ("transformers", "ctranslate2", "keras-hub")
COLUMNS = ["implementation", "mode", "dtype", "k", "ms_per_token", "speedup",
           "tfspec_speedup_over_this", "tfspec_spec_speedup_over_this", "greedy_rows_differing",
           "greedy_tokens_differing", "tv_first_token", "tv_noise_floor", "note"]


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.peers", __doc__.split("\n")[0])
    parser.add_argument("--target", default=bench_models.DEFAULT_TARGET)
    parser.add_argument("--draft", default=bench_models.DEFAULT_DRAFT)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--num_prompts", type=int, default=4)
    parser.add_argument("--prompt_length", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tv_target", default=TINY_TV_TARGET)
    parser.add_argument("--tv_draft", default=TINY_TV_DRAFT)
    parser.add_argument("--tv_samples", type=int, default=2000,
                        help="speculative samples per implementation for the TV check "
                             "(0 disables it)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated peers to run beside tfspec, of {', '.join(PEERS)}")
    parser.add_argument("--hf_python", default=sys.executable,
                        help="python with torch + transformers (e.g. a venv's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="")
    parser.add_argument("--eager", action="store_true",
                        help="run tfspec eagerly (quick checks only; timings meaningless)")
    args = parser.parse_args(argv)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in args.peers if p not in PEERS]
    if unknown:
        parser.error(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    return args


def hf_available(python: str) -> bool:
    """True if `python` can import torch and transformers."""
    try:
        proc = subprocess.run([python, "-c", "import torch, transformers"],
                              capture_output=True, timeout=300,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def keras_hub_status() -> str:
    """Why keras-hub's SpeculativeSampler can or cannot drive a T5 (from its source)."""
    try:
        from keras_hub.src.models.t5 import t5_seq_2_seq_lm
        from keras_hub.src.samplers import speculative_sampler  # noqa: F401
    except ImportError as e:
        return f"keras-hub (or its SpeculativeSampler) not importable: {e}"
    source = inspect.getsource(t5_seq_2_seq_lm.T5Seq2SeqLM.generate_step)
    if "draft_next" not in source:
        return ("cannot drive T5: keras_hub SpeculativeSampler requires `draft_next` (and "
                "`verify_next` for one-pass verification), but T5Seq2SeqLM.generate_step calls "
                "its sampler with `next` only (only causal LMs such as Gemma4CausalLM wire a "
                "draft), so a T5 with sampler=SpeculativeSampler raises; its batched bonus "
                "step also advances all rows by the batch's minimum accepted length")
    return "T5Seq2SeqLM wires draft_next: not benchmarked here yet"


def tv_distance(counts, probs) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    return 0.5 * float(np.sum(np.abs(counts / counts.sum() - np.asarray(probs))))


def tv_noise_floor(probs, samples: int, trials: int = 200, seed: int = 0) -> float:
    """Mean TV distance of `samples` i.i.d. draws from `probs` to `probs` itself."""
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(samples, probs, size=trials)
    return float(np.mean([tv_distance(d, probs) for d in draws]))


def exact_first_token_probs(target, prompt: Sequence[int]) -> np.ndarray:
    """The target's temperature-1 softmax at the first decoder position (float64)."""
    start = target.config.decoder_start_token_id
    logits = target.forward(np.asarray([prompt], np.int32), None, np.asarray([[start]], np.int32))
    logits = np.asarray(logits, np.float64)[0, 0]
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


def ours_first_token_counts(target, draft, prompt, k: int, samples: int, seed: int,
                            jit_compile: Optional[bool] = True):
    """First-token counts of `samples` rows of speculative sampling (one call, distinct rows)."""
    gen = tfspec.generate(target, [list(prompt)] * samples, draft=draft, k=k,
                          sampling=tfspec.Sampling(temperature=1.0), max_new_tokens=k + 1,
                          seed=seed, eos_id=None, jit_compile=jit_compile)
    return np.bincount(gen.tokens[:, 0], minlength=target.vocab_size)


def greedy_diff(reference_rows, rows) -> dict:
    """How far greedy `rows` are from `reference_rows` (lists of token ids, prompt by prompt).

    A position differs when the tokens differ or only one row has it (one ended earlier).
    """
    rows_differing = tokens_differing = compared = 0
    for reference, row in zip(reference_rows, rows):
        width = max(len(reference), len(row))
        differing = sum(1 for i in range(width)
                        if i >= len(reference) or i >= len(row) or reference[i] != row[i])
        compared += width
        tokens_differing += differing
        rows_differing += int(differing > 0)
    return {"greedy_rows_differing": rows_differing, "greedy_rows_compared": len(reference_rows),
            "greedy_tokens_differing": tokens_differing, "greedy_tokens_compared": compared}


def _tfspec_decode_fn(target, draft, k, max_new_tokens, jit_compile):
    """Greedy batch-1 decoding of each prompt in turn (as transformers does) -> rows of ids."""
    greedy = tfspec.Sampling(temperature=0.0)

    def decode(prompts):
        rows = []
        for prompt in prompts:
            gen = tfspec.generate(target, [prompt], draft=draft, k=k, sampling=greedy,
                                  max_new_tokens=max_new_tokens, jit_compile=jit_compile)
            rows.append(gen.row_tokens(0))
        return rows
    return decode


def _skipped(implementation: str, message: str) -> dict:
    return {"implementation": implementation, "mode": "-", "note": message}


def _in_process_peers(names, target_dir, workdir, prompts, max_new_tokens):
    """(decoders, skipped records) of the peers that run in this process.

    Each decoder is (record, decode_fn): decode_fn(prompts) -> greedy rows of ids. A peer that
    is not installed, or cannot hold the checkpoint, becomes a record with a note instead.
    """
    decoders, skipped = [], []
    if "ctranslate2" in names:
        reason = ctranslate2_peer.available()
        if reason:
            skipped.append(_skipped("ctranslate2", f"skipped: {reason}; install it with "
                                                   f"{ctranslate2_peer.INSTALL_HINT}"))
        else:
            try:
                model_dir = ctranslate2_peer.convert(target_dir, os.path.join(workdir, "ct2"))
                for compute_type in ctranslate2_peer.COMPUTE_TYPES:
                    decoder = ctranslate2_peer.Ct2Decoder(model_dir, compute_type,
                                                          max_new_tokens)
                    decoders.append(({"implementation": "ctranslate2", "mode": "autoregressive",
                                      "dtype": compute_type, "k": 0}, decoder.greedy))
            except (ValueError, RuntimeError, OSError) as e:
                skipped.append(_skipped("ctranslate2", f"failed: {' '.join(str(e).split())}"))
    if "keras-hub" in names:
        reason = keras_hub_peer.available()
        if reason:
            skipped.append(_skipped("keras-hub", f"skipped: {reason}; install it with "
                                                 f"{keras_hub_peer.INSTALL_HINT}"))
        else:
            try:
                decoder = keras_hub_peer.KerasHubDecoder(
                    target_dir, max(len(p) for p in prompts), max_new_tokens)
                decoders.append(({"implementation": "keras-hub", "mode": "autoregressive",
                                  "dtype": "float32", "k": 0}, decoder.greedy))
            except (ValueError, RuntimeError, OSError) as e:
                skipped.append(_skipped("keras-hub", f"failed: {' '.join(str(e).split())}"))
    return decoders, skipped


def peer_versions(names) -> dict:
    """Versions of the installed in-process peers among `names`."""
    versions = {}
    if "ctranslate2" in names and not ctranslate2_peer.available():
        versions["ctranslate2"] = ctranslate2_peer.version()
    if "keras-hub" in names and not keras_hub_peer.available():
        versions["keras_hub"] = keras_hub_peer.version()
    return versions


def _run_hf(hf_python, target_dir, draft, tv_target, tv_draft, prompts, k, max_new_tokens,
            repeats, tv_prompt, tv_samples, seed, workdir):
    dirs = {"target": target_dir,
            "draft": tfspec.save_model(draft, os.path.join(workdir, "draft"), dtype="float32")}
    request = {"target_dir": dirs["target"], "draft_dir": dirs["draft"], "prompts": prompts,
               "max_new_tokens": max_new_tokens, "k": k, "repeats": repeats,
               "tv_samples": 0, "seed": seed}
    results = {}
    jobs = [("timing", request)]
    if tv_samples > 0:
        tv_dirs = {name: tfspec.save_model(m, os.path.join(workdir, "tv_" + name),
                                           dtype="float32")
                   for name, m in (("target", tv_target), ("draft", tv_draft))}
        jobs.append(("tv", dict(request, target_dir=tv_dirs["target"],
                                draft_dir=tv_dirs["draft"], prompts=[tv_prompt],
                                max_new_tokens=2, repeats=1, tv_prompt=tv_prompt,
                                tv_samples=tv_samples, tv_max_new_tokens=k + 1)))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_hf_peer.py")
    for name, req in jobs:
        req_path = os.path.join(workdir, f"{name}_request.json")
        out_path = os.path.join(workdir, f"{name}_result.json")
        with open(req_path, "w") as f:
            json.dump(req, f)
        proc = subprocess.run([hf_python, script, req_path, out_path], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"transformers worker failed:\n{proc.stderr[-3000:]}")
        with open(out_path) as f:
            results[name] = json.load(f)
    return results


def run(target, draft, prompts, k: int, max_new_tokens: int, repeats: int,
        tv_target=None, tv_draft=None, tv_samples: int = 0, tv_prompt_length: int = 8,
        hf_python: Optional[str] = None, seed: int = 0,
        jit_compile: Optional[bool] = True, peers: Sequence[str] = PEERS) -> dict:
    """Side-by-side records (see the module docstring).

    `peers`: which of `PEERS` to run. A peer that is not installed gets one skipped record
    (with the pip command) instead of its rows, and is listed in `skipped_peers`;
    `hf_python` None or without torch/transformers skips transformers and also sets
    `skipped`.
    """
    prompts = [list(p) for p in prompts]
    peers = list(peers)
    with tempfile.TemporaryDirectory() as workdir:
        # One export, read by every peer: they all decode the same float32 weights.
        target_dir = tfspec.save_model(target, os.path.join(workdir, "target"),
                                       dtype="float32")
        peer_decoders, records_skipped = _in_process_peers(peers, target_dir, workdir, prompts,
                                                           max_new_tokens)
        ours_ar = {"implementation": "tfspec", "mode": "autoregressive", "dtype": "float32",
                   "k": 0}
        ours_spec = {"implementation": "tfspec", "mode": "speculative", "dtype": "float32",
                     "k": k}
        decoders = [(ours_ar, _tfspec_decode_fn(target, None, 0, max_new_tokens, jit_compile)),
                    (ours_spec, _tfspec_decode_fn(target, draft, k, max_new_tokens,
                                                  jit_compile))] + peer_decoders
        seconds, rows = timing.interleaved_runs(
            [lambda fn=fn: fn(prompts) for _, fn in decoders], repeats)
        timed = []
        for (record, _), secs, record_rows in zip(decoders, seconds, rows):
            tokens = sum(len(r) for r in record_rows)
            record["ms_per_token"] = 1e3 * secs / max(1, tokens)
            record["tokens"] = tokens
            if record is not ours_ar:  # tfspec autoregressive is the reference.
                record.update(greedy_diff(rows[0], record_rows))
            timed.append(record)
        ar_ms = ours_ar["ms_per_token"]
        ours_ar["speedup"] = 1.0
        ours_spec["speedup"] = ar_ms / ours_spec["ms_per_token"]
        records = timed[:2]

        tv_prompt = None
        if tv_samples > 0:
            rng = np.random.RandomState(seed)
            tv_prompt = rng.randint(3, tv_target.vocab_size, size=tv_prompt_length).tolist()
            probs = exact_first_token_probs(tv_target, tv_prompt)
            counts = ours_first_token_counts(tv_target, tv_draft, tv_prompt, k, tv_samples,
                                             seed, jit_compile)
            ours_spec["tv_first_token"] = tv_distance(counts, probs)
            ours_spec["tv_noise_floor"] = tv_noise_floor(probs, tv_samples, seed=seed)

        skipped = None
        hf = None
        if "transformers" in peers:
            if hf_python is None or not hf_available(hf_python):
                skipped = SKIP_MESSAGE
                print(skipped, flush=True)
                records.append({"implementation": "transformers", "mode": "-",
                                "note": skipped})
            else:
                hf = _run_hf(hf_python, target_dir, draft, tv_target, tv_draft, prompts, k,
                             max_new_tokens, repeats, tv_prompt, tv_samples, seed, workdir)
    if hf:
        timing_result = hf["timing"]
        hf_ar = {"implementation": "transformers", "mode": "autoregressive",
                 "dtype": "float32", "k": 0, "ms_per_token": timing_result["ar_ms_per_token"],
                 "speedup": 1.0}
        if "ar_rows" in timing_result:
            hf_ar.update(greedy_diff(rows[0], timing_result["ar_rows"]))
        records.append(hf_ar)
        hf_spec = {"implementation": "transformers", "mode": "assisted", "dtype": "float32",
                   "k": k, "ms_per_token": timing_result["assisted_ms_per_token"],
                   "speedup": timing_result["ar_ms_per_token"]
                   / timing_result["assisted_ms_per_token"]}
        if "tv" in hf:
            hf_probs = hf["tv"]["exact_first_token_probs"]
            hf_spec["tv_first_token"] = tv_distance(hf["tv"]["first_token_counts"], hf_probs)
            hf_spec["tv_noise_floor"] = tv_noise_floor(hf_probs, tv_samples, seed=seed)
            hf_spec["exact_probs_max_abs_diff_vs_tfspec"] = float(
                np.max(np.abs(np.asarray(hf_probs) - probs)))
        records.append(hf_spec)
    records.extend(timed[2:])
    records.extend(records_skipped)
    if "keras-hub" in peers:
        records.append({"implementation": "keras-hub", "mode": "SpeculativeSampler", "k": k,
                        "note": keras_hub_status()})
    for record in records:
        if "ms_per_token" in record and record["implementation"] != "tfspec":
            record["tfspec_speedup_over_this"] = record["ms_per_token"] / (
                ours_spec["ms_per_token"] if record["mode"] != "autoregressive" else ar_ms)
            record["tfspec_spec_speedup_over_this"] = (record["ms_per_token"]
                                                       / ours_spec["ms_per_token"])
    skipped_peers = {r["implementation"]: r["note"] for r in records
                     if r.get("mode") == "-"}
    return {"k": k, "batch_size": 1, "max_new_tokens": max_new_tokens, "repeats": repeats,
            "num_prompts": len(prompts), "tv_samples": tv_samples, "peers": peers,
            "skipped": skipped, "skipped_peers": skipped_peers,
            "transformers_versions": hf["timing"]["versions"] if hf else None,
            "peer_versions": peer_versions(peers),
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    with bench_models.exit_on_input_error():
        target, draft = bench_models.load_pair(args.target, args.draft)
        bench_models.require_token_draft(
            draft, args.draft, "bench.peers",
            "the peers are given the draft as a T5 checkpoint (transformers' assistant_model); "
            "compare feature drafts with bench.speedup or bench.draft_kinds")
    prompts = bench_models.prompts(args.target, target, args.num_prompts, args.prompt_length,
                                   args.seed)
    tv_target = tv_draft = None
    if args.tv_samples > 0:
        with bench_models.exit_on_input_error():
            tv_target, tv_draft = bench_models.load_pair(args.tv_target, args.tv_draft)
            bench_models.require_token_draft(
                tv_draft, args.tv_draft, "bench.peers",
                "--tv_draft is exported as a T5 checkpoint for transformers")
    result = run(target, draft, prompts, args.k, args.max_new_tokens, args.repeats, tv_target,
                 tv_draft, args.tv_samples, hf_python=args.hf_python, seed=args.seed,
                 jit_compile=None if args.eager else True, peers=args.peers)
    rows = [{c: "" if r.get(c) is None else r[c] for c in COLUMNS} for r in result["records"]]
    for row in rows:
        row["note"] = row["note"][:40] + "..." if len(row["note"]) > 40 else row["note"]
    # Columns no row fills (e.g. the TV pair with --tv_samples 0) are left out of the table.
    timing.print_table(rows, [c for c in COLUMNS if any(r[c] != "" for r in rows)])
    for record in result["records"]:
        if record.get("note"):
            print(f"{record['implementation']}: {record['note']}")
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
