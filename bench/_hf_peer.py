"""Hugging Face transformers side of bench.peers (run as a script in a torch environment).

    PYTHON bench/_hf_peer.py REQUEST.json RESULT.json

Imports only numpy, torch and transformers (never tfspec or TensorFlow), so it can run in a
separate virtualenv. REQUEST holds `target_dir, draft_dir, prompts, max_new_tokens, k,
repeats, tv_prompt, tv_samples, tv_max_new_tokens, seed`; RESULT gets

    versions            torch / transformers versions
    ar_ms_per_token     greedy `generate` of the target, batch 1, ms per emitted token
    ar_rows             its greedy tokens per prompt (after the decoder start, up to and
                        including the first EOS)
    assisted_ms_per_token   greedy assisted generation (`assistant_model=draft`,
                        `num_assistant_tokens=k`, constant schedule), ms per emitted token
    first_token_counts  counts over vocab of the first token of `tv_samples` sampled assisted
                        generations (temperature 1, no top-k/top-p) from `tv_prompt`
    exact_first_token_probs   the target's softmax at the first decoder position
                        (temperature 1), from a plain forward pass

AR and assisted calls alternate (interleaved), one warm-up call each first.
"""

import json
import sys
import time

import numpy as np


def _count_tokens(sequences, eos_id, pad_id):
    """Emitted tokens per row: after the decoder start, up to and including the first EOS."""
    total = 0
    for row in sequences.tolist():
        row = row[1:]
        n = 0
        for token in row:
            n += 1
            if token == eos_id:
                break
        # Trailing padding (only after an EOS in a batch) is never counted by the loop above.
        total += n
    return total


def _emitted(sequence, eos_id):
    """The ids of one generated row after the decoder start, up to and including EOS."""
    row = sequence.tolist()[1:]
    return row[:row.index(eos_id) + 1] if eos_id in row else row


def main(request_path, result_path):
    import torch
    import transformers

    with open(request_path) as f:
        req = json.load(f)
    torch.manual_seed(req.get("seed", 0))
    torch.set_grad_enabled(False)
    cls = transformers.T5ForConditionalGeneration
    target = cls.from_pretrained(req["target_dir"], dtype=torch.float32).eval()
    draft = cls.from_pretrained(req["draft_dir"], dtype=torch.float32).eval()
    eos_id = target.config.eos_token_id
    pad_id = target.config.pad_token_id
    k = int(req["k"])
    common = dict(max_new_tokens=int(req["max_new_tokens"]), do_sample=False, num_beams=1,
                  top_k=None, top_p=None, temperature=None)

    ar_rows = []

    def ar():
        tokens = 0
        ar_rows.clear()
        for prompt in req["prompts"]:
            out = target.generate(torch.tensor([prompt]), **common)
            tokens += _count_tokens(out, eos_id, pad_id)
            ar_rows.append(_emitted(out[0], eos_id))
        return tokens

    def assisted():
        tokens = 0
        for prompt in req["prompts"]:
            out = target.generate(torch.tensor([prompt]), assistant_model=draft,
                                  num_assistant_tokens=k,
                                  num_assistant_tokens_schedule="constant",
                                  assistant_confidence_threshold=0.0, **common)
            tokens += _count_tokens(out, eos_id, pad_id)
        return tokens

    fns = [ar, assisted]
    tokens = [fn() for fn in fns]  # Warm-up.
    samples = [[], []]
    for _ in range(max(1, int(req["repeats"]))):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            tokens[i] = fn()
            samples[i].append(time.perf_counter() - start)
    ar_ms = 1e3 * float(np.median(samples[0])) / max(1, tokens[0])
    assisted_ms = 1e3 * float(np.median(samples[1])) / max(1, tokens[1])

    result = {"versions": {"torch": torch.__version__,
                           "transformers": transformers.__version__},
              "ar_ms_per_token": ar_ms, "assisted_ms_per_token": assisted_ms,
              "ar_tokens": tokens[0], "assisted_tokens": tokens[1], "ar_rows": ar_rows}

    if int(req.get("tv_samples", 0)) > 0:
        prompt = torch.tensor([req["tv_prompt"]])
        start_id = target.config.decoder_start_token_id
        logits = target(input_ids=prompt,
                        decoder_input_ids=torch.tensor([[start_id]])).logits[0, 0]
        probs = torch.softmax(logits.double(), -1).numpy()
        counts = np.zeros(probs.shape[0], dtype=np.int64)
        for _ in range(int(req["tv_samples"])):
            out = target.generate(prompt, assistant_model=draft, num_assistant_tokens=k,
                                  num_assistant_tokens_schedule="constant",
                                  assistant_confidence_threshold=0.0, do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0,
                                  max_new_tokens=int(req["tv_max_new_tokens"]))
            counts[int(out[0, 1])] += 1
        result["first_token_counts"] = counts.tolist()
        result["exact_first_token_probs"] = probs.tolist()

    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
