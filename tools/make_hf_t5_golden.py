"""Writes the Hugging Face T5 golden fixtures in tests/fixtures/hf_t5/.

The fixtures pin tfspec's T5 to transformers' PyTorch T5 (the reference implementation every
public T5 checkpoint is checked against) without needing torch at test time:

    tests/fixtures/hf_t5/<name>/config.json, model.safetensors   (HF save_pretrained output)
    tests/fixtures/hf_t5/<name>/golden.npz                       (reference inputs/outputs)

Models (random, tiny, 2 encoder layers):
  v1_0          relu FFN, tied embeddings (decoder output scaled by d_model**-0.5), default
                32 buckets / max distance 128, prompts long enough (20) to reach the
                logarithmic encoder buckets including the edge distance 16.
  v1_1          gated-gelu (tanh GELU), untied lm_head, 3 decoder layers, 16 buckets / max
                distance 24 so that short sequences reach the logarithmic buckets.
  v1_1_hf5_tied the layout transformers >= 5 writes for a new v1.1 model: config says
                `tie_word_embeddings: true, scale_decoder_outputs: false`, no lm_head tensor.

golden.npz holds: encoder_ids [B, S] int32 (right-padded with 0), encoder_lengths [B],
decoder_input_ids [B, T], logits float32 [B, T, V], decoder_states float32 [B, T, D]
(decoder last_hidden_state), greedy_tokens int32 [B, G] (G greedy steps from the start
token, EOS not treated specially), greedy_min_margin (smallest top-1 minus top-2 logit gap on
the greedy path, so the test's exact-token check is not a coin flip), and relative position
bucket tables `buckets_{bi,uni}_{nb}_{md}` for relative positions -200..200.

Usage (torch is NOT a tfspec dependency; use a throwaway virtualenv):

    python -m venv /tmp/hfenv
    /tmp/hfenv/bin/pip install torch==2.13.0 transformers safetensors numpy
    /tmp/hfenv/bin/python tools/make_hf_t5_golden.py [--out tests/fixtures/hf_t5]

Expected output: one line per model with the max |logit| and the greedy margin, e.g.
"v1_0: logits max 4.1, greedy margin 0.03, reload diff 0.0".
"""

import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import T5Config, T5ForConditionalGeneration
from transformers.models.t5.modeling_t5 import T5Attention

GREEDY_STEPS = 12
REL_RANGE = 200

MODELS = {
    "v1_0": dict(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4,
                 feed_forward_proj="relu", tie_word_embeddings=True,
                 relative_attention_num_buckets=32, relative_attention_max_distance=128),
    "v1_1": dict(vocab_size=64, d_model=16, d_kv=4, d_ff=24, num_layers=2,
                 num_decoder_layers=3, num_heads=4, feed_forward_proj="gated-gelu",
                 tie_word_embeddings=False, relative_attention_num_buckets=16,
                 relative_attention_max_distance=24),
    "v1_1_hf5_tied": dict(vocab_size=64, d_model=16, d_kv=4, d_ff=24, num_layers=2,
                          num_heads=4, feed_forward_proj="gated-gelu",
                          tie_word_embeddings=False, relative_attention_num_buckets=16,
                          relative_attention_max_distance=24),
}


def _inputs(rng, vocab_size):
    """Two prompts (lengths 20 and 9, right-padded with 0) and a 24-token decoder input."""
    lengths = np.array([20, 9], np.int32)
    encoder_ids = np.zeros((2, 20), np.int32)
    for row, n in enumerate(lengths):
        encoder_ids[row, :n] = rng.integers(2, vocab_size, size=n)
    decoder_input_ids = rng.integers(2, vocab_size, size=(2, 24)).astype(np.int32)
    decoder_input_ids[:, 0] = 0  # decoder start token = pad id
    return encoder_ids, lengths, decoder_input_ids


def _forward(model, encoder_ids, lengths, decoder_input_ids):
    mask = (np.arange(encoder_ids.shape[1])[None] < lengths[:, None]).astype(np.int64)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(encoder_ids.astype(np.int64)),
                    attention_mask=torch.from_numpy(mask),
                    decoder_input_ids=torch.from_numpy(decoder_input_ids.astype(np.int64)),
                    output_hidden_states=True)
    return out.logits.numpy(), out.decoder_hidden_states[-1].numpy()


def _greedy(model, encoder_ids, lengths):
    """Greedy tokens by repeated uncached forward passes, and the smallest top-2 margin."""
    tokens = np.zeros((encoder_ids.shape[0], 1), np.int32)
    margin = np.inf
    for _ in range(GREEDY_STEPS):
        logits, _ = _forward(model, encoder_ids, lengths, tokens)
        last = logits[:, -1]
        top2 = np.sort(last, axis=-1)[:, -2:]
        margin = min(margin, float((top2[:, 1] - top2[:, 0]).min()))
        tokens = np.concatenate([tokens, last.argmax(-1)[:, None].astype(np.int32)], 1)
    return tokens[:, 1:], margin


def _greedy_hf_generate(model, encoder_ids, lengths):
    """The same greedy tokens through HF's `generate` (a check of the fixture).

    transformers 5.24's cached generate sizes its decoder cache by `num_layers`, so it fails
    with an IndexError when `num_decoder_layers` differs; such models generate uncached.
    """
    mask = (np.arange(encoder_ids.shape[1])[None] < lengths[:, None]).astype(np.int64)
    with torch.no_grad():
        out = model.generate(input_ids=torch.from_numpy(encoder_ids.astype(np.int64)),
                             attention_mask=torch.from_numpy(mask), do_sample=False,
                             num_beams=1, max_new_tokens=GREEDY_STEPS,
                             min_new_tokens=GREEDY_STEPS, eos_token_id=None,
                             decoder_start_token_id=0, pad_token_id=0,
                             use_cache=model.config.num_decoder_layers == model.config.num_layers)
    return out.numpy()[:, 1:]


def _bucket_tables():
    relative = torch.arange(-REL_RANGE, REL_RANGE + 1)
    tables = {}
    for nb, md in ((32, 128), (16, 24), (8, 20)):
        for bidirectional in (True, False):
            b = T5Attention._relative_position_bucket(relative, bidirectional=bidirectional,
                                                      num_buckets=nb, max_distance=md)
            tables[f"buckets_{'bi' if bidirectional else 'uni'}_{nb}_{md}"] = (
                b.numpy().astype(np.int32))
    return tables


def make(name, spec, out_dir, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = T5Config(dropout_rate=0.0, decoder_start_token_id=0, **spec)
    model = T5ForConditionalGeneration(config).eval()
    if name == "v1_1":
        # transformers >= 5 always ties lm_head to shared at construction and keeps the v1.1
        # "no rescale" in `scale_decoder_outputs`. A classic v1.1/FLAN checkpoint has a separate
        # head: give it its own random weights and say so in the config.
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
        model.config.tie_word_embeddings = False
        model.all_tied_weights_keys.pop("lm_head.weight", None)
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    if name == "v1_1":
        # Public v1.1/FLAN config.json files predate `scale_decoder_outputs`; write it the way
        # they look (tie_word_embeddings false alone implies "no rescale").
        config_path = os.path.join(path, "config.json")
        with open(config_path) as f:
            saved = json.load(f)
        saved.pop("scale_decoder_outputs", None)
        with open(config_path, "w") as f:
            json.dump(saved, f, indent=2, sort_keys=True)
            f.write("\n")
    gen_config = os.path.join(path, "generation_config.json")
    if os.path.exists(gen_config):
        os.remove(gen_config)  # Not part of the checkpoint layout tfspec reads.

    encoder_ids, lengths, decoder_input_ids = _inputs(rng, config.vocab_size)
    logits, states = _forward(model, encoder_ids, lengths, decoder_input_ids)
    greedy, margin = _greedy(model, encoder_ids, lengths)
    generated = _greedy_hf_generate(model, encoder_ids, lengths)
    assert np.array_equal(generated, greedy), (generated, greedy)

    # The saved files must reproduce the in-memory model through HF's own loader.
    reloaded = T5ForConditionalGeneration.from_pretrained(path).eval()
    reload_logits, _ = _forward(reloaded, encoder_ids, lengths, decoder_input_ids)
    reload_diff = float(np.abs(reload_logits - logits).max())
    assert reload_diff == 0.0, reload_diff

    np.savez_compressed(
        os.path.join(path, "golden.npz"), encoder_ids=encoder_ids, encoder_lengths=lengths,
        decoder_input_ids=decoder_input_ids, logits=logits.astype(np.float32),
        decoder_states=states.astype(np.float32), greedy_tokens=greedy.astype(np.int32),
        greedy_min_margin=np.float32(margin), **_bucket_tables())
    with open(os.path.join(path, "config.json")) as f:
        saved = json.load(f)
    print(f"{name}: logits max {np.abs(logits).max():.3g}, greedy margin {margin:.3g}, "
          f"reload diff {reload_diff}, tie_word_embeddings={saved.get('tie_word_embeddings')}, "
          f"scale_decoder_outputs={saved.get('scale_decoder_outputs')}, "
          f"transformers {transformers.__version__}")


def main():
    # The convention of evals/cli.py (defaults in the help), without importing the project:
    # this tool runs in a separate torch environment.
    parser = argparse.ArgumentParser(prog="python tools/make_hf_t5_golden.py",
                                     description=__doc__.split("\n")[0], allow_abbrev=False,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", help="fixture folder", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures",
        "hf_t5"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the first model")
    args = parser.parse_args()
    for i, (name, spec) in enumerate(MODELS.items()):
        make(name, spec, args.out, args.seed + i)


if __name__ == "__main__":
    main()
