"""tfspec against other implementations on the same weights and prompts (optional extra).

Side by side at batch 1, greedy, over the same prompts:

    tfspec  ar / spec                      our loop, k = 0 and k (interleaved)
    transformers  ar / assisted            `T5ForConditionalGeneration.generate` on our
                                           checkpoints exported with `tfspec.save_model`,
                                           without and with `assistant_model=draft`
                                           (`num_assistant_tokens=k`, constant schedule)
    keras-hub  SpeculativeSampler          run when keras-hub can drive a T5 with it;
                                           otherwise the reason is printed

    ms_per_token    wall time per emitted token (each implementation interleaves its own
                    baseline and speculative calls; the two run in separate processes, so
                    compare their ratios before their absolute numbers)

and, for sampled decoding (temperature 1, no top-k/top-p), the exactness check:

    tv_first_token  total-variation distance between the first-token frequencies of
                    `--tv_samples` speculative samples and the target's exact softmax
    tv_noise_floor  the mean TV of that many i.i.d. draws from the exact distribution:
                    an exact sampler should score about this, a biased one clearly more

on a toy pair (`--tv_target/--tv_draft`, tiny random T5s by default).

transformers runs in `--hf_python` (default: this interpreter) as a subprocess
(bench/_hf_peer.py), so it can live in its own virtualenv. Without torch/transformers there
it prints "skipped: install tfspec[peers]" and exits 0.

    python -m bench.peers --k 4 --json runs/bench/peers.json
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
from bench import models as bench_models
from bench import timing
from evals import cli

SKIP_MESSAGE = "skipped: install tfspec[peers] (torch and transformers) to compare with peers"
TINY_TV_TARGET = "random:t5-small:vocab_size=64,d_model=32,d_kv=8,d_ff=64,num_layers=2,num_heads=4"
TINY_TV_DRAFT = "random:t5-small:vocab_size=64,d_model=16,d_kv=8,d_ff=32,num_layers=1,num_heads=2"
COLUMNS = ["implementation", "mode", "k", "ms_per_token", "speedup", "tv_first_token",
           "tv_noise_floor", "note"]


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
    parser.add_argument("--hf_python", default=sys.executable,
                        help="python with torch + transformers (e.g. a venv's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="")
    parser.add_argument("--eager", action="store_true",
                        help="run tfspec eagerly (quick checks only; timings meaningless)")
    return parser.parse_args(argv)


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


def _ours_timing(target, draft, prompts, k, max_new_tokens, repeats, jit_compile):
    greedy = tfspec.Sampling(temperature=0.0)

    def call(kk, d):
        def fn():
            tokens = 0
            for prompt in prompts:  # Batch 1, one prompt at a time, as transformers does.
                gen = tfspec.generate(target, [prompt], draft=d, k=kk, sampling=greedy,
                                      max_new_tokens=max_new_tokens,
                                      jit_compile=jit_compile)
                tokens += int(np.sum(gen.lengths))
            return tokens
        return fn

    (ar_s, spec_s), (ar_tokens, spec_tokens) = timing.interleaved_runs(
        [call(0, None), call(k, draft)], repeats)
    return 1e3 * ar_s / max(1, ar_tokens), 1e3 * spec_s / max(1, spec_tokens)


def _run_hf(hf_python, target, draft, tv_target, tv_draft, prompts, k, max_new_tokens,
            repeats, tv_prompt, tv_samples, seed, workdir):
    dirs = {}
    for name, model in (("target", target), ("draft", draft)):
        dirs[name] = tfspec.save_model(model, os.path.join(workdir, name), dtype="float32")
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
        jit_compile: Optional[bool] = True) -> dict:
    """Side-by-side records (see the module docstring).

    `hf_python` None or without torch/transformers: the transformers rows are replaced by one
    skipped row and `skipped` is set.
    """
    prompts = [list(p) for p in prompts]
    records = []
    ar_ms, spec_ms = _ours_timing(target, draft, prompts, k, max_new_tokens, repeats,
                                   jit_compile)
    records.append({"implementation": "tfspec", "mode": "autoregressive", "k": 0,
                    "ms_per_token": ar_ms, "speedup": 1.0})
    ours_spec = {"implementation": "tfspec", "mode": "speculative", "k": k,
                 "ms_per_token": spec_ms, "speedup": ar_ms / spec_ms}
    records.append(ours_spec)

    tv_prompt = None
    if tv_samples > 0:
        rng = np.random.RandomState(seed)
        tv_prompt = rng.randint(3, tv_target.vocab_size, size=tv_prompt_length).tolist()
        probs = exact_first_token_probs(tv_target, tv_prompt)
        counts = ours_first_token_counts(tv_target, tv_draft, tv_prompt, k, tv_samples, seed,
                                         jit_compile)
        ours_spec["tv_first_token"] = tv_distance(counts, probs)
        ours_spec["tv_noise_floor"] = tv_noise_floor(probs, tv_samples, seed=seed)

    skipped = None
    hf = None
    if hf_python is None or not hf_available(hf_python):
        skipped = SKIP_MESSAGE
        print(skipped, flush=True)
        records.append({"implementation": "transformers", "mode": "-", "note": skipped})
    else:
        with tempfile.TemporaryDirectory() as workdir:
            hf = _run_hf(hf_python, target, draft, tv_target, tv_draft, prompts, k,
                         max_new_tokens, repeats, tv_prompt, tv_samples, seed, workdir)
        timing_result = hf["timing"]
        records.append({"implementation": "transformers", "mode": "autoregressive", "k": 0,
                        "ms_per_token": timing_result["ar_ms_per_token"], "speedup": 1.0})
        hf_spec = {"implementation": "transformers", "mode": "assisted", "k": k,
                   "ms_per_token": timing_result["assisted_ms_per_token"],
                   "speedup": timing_result["ar_ms_per_token"]
                   / timing_result["assisted_ms_per_token"]}
        if "tv" in hf:
            hf_probs = hf["tv"]["exact_first_token_probs"]
            hf_spec["tv_first_token"] = tv_distance(hf["tv"]["first_token_counts"], hf_probs)
            hf_spec["tv_noise_floor"] = tv_noise_floor(hf_probs, tv_samples, seed=seed)
            hf_spec["exact_probs_max_abs_diff_vs_tfspec"] = float(
                np.max(np.abs(np.asarray(hf_probs) - probs)))
        records.append(hf_spec)
    records.append({"implementation": "keras-hub", "mode": "SpeculativeSampler", "k": k,
                    "note": keras_hub_status()})
    for record in records:
        if "ms_per_token" in record and record["implementation"] != "tfspec":
            record["tfspec_speedup_over_this"] = record["ms_per_token"] / (
                ours_spec["ms_per_token"] if record["mode"] != "autoregressive" else ar_ms)
    return {"k": k, "batch_size": 1, "max_new_tokens": max_new_tokens, "repeats": repeats,
            "tv_samples": tv_samples, "skipped": skipped,
            "transformers_versions": hf["timing"]["versions"] if hf else None,
            "machine": platform.processor() or platform.machine(), "records": records}


def main(argv=None):
    args = _parse_args(argv)
    target, draft = bench_models.load_pair(args.target, args.draft)
    prompts = bench_models.prompts(args.target, target, args.num_prompts, args.prompt_length,
                                   args.seed)
    tv_target = tv_draft = None
    if args.tv_samples > 0:
        tv_target, tv_draft = bench_models.load_pair(args.tv_target, args.tv_draft)
    result = run(target, draft, prompts, args.k, args.max_new_tokens, args.repeats, tv_target,
                 tv_draft, args.tv_samples, hf_python=args.hf_python, seed=args.seed,
                 jit_compile=None if args.eager else True)
    rows = [dict(r, note=(r["note"][:40] + "...") if len(r.get("note") or "") > 40
                 else r.get("note", "")) for r in result["records"]]
    timing.print_table(rows, COLUMNS)
    for record in result["records"]:
        if record.get("note"):
            print(f"{record['implementation']}: {record['note']}")
    timing.write_json(args.json, result)


if __name__ == "__main__":
    main()
