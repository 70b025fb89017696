r"""The embedded default pair: a tiny T5 code target and a draft distilled from it.

Trains `zoo:tiny-code-target` and `zoo:tiny-code-draft` (shipped in `tfspec/zoo/`) from
scratch on the offline code corpus (`recipes.tiny_code.corpus`: the Python standard library
plus a few installed packages, HumanEval look-alikes removed), multitask: completion
(HumanEval-shaped prompt as is -> body) and docsum (`summarize: ` + code -> first docstring
sentence).

Command (resumable: after an interruption, re-run the very same command):

    python -m recipes.tiny_code.train --config configs/zoo_tiny_code.py --stage all

  default workdir ~/.cache/tfspec/train/zoo_tiny_code; `--stage target|draft|export` runs one
  stage; `--stage all` skips finished stages; `--max_steps N` trains to step N instead of the
  config's steps (schedule unchanged; smoke runs); `configs/zoo_tiny_code.py:smoke` is a
  tiny version of the whole recipe (about a minute).

Models (parameters measured with `tfspec.models.T5`):

  target  T5 v1.1 style, d_model 384, 6 heads x 64, d_ff 1024 gated-GELU, 4 encoder + 4
          decoder layers, untied head, vocab 8192: 22.8M parameters (45.6 MB bfloat16).
  draft   wide and shallow (Chen et al. 2023): d_model 256, 4 heads x 64, d_ff 1024
          gated-GELU, 2 encoder + 1 decoder layer, tied embeddings: 5.5M parameters (11 MB).

  Batch-1 greedy decode step on this 2-core CPU (random weights, `tfspec.generate(k=0)`,
  128 tokens, prompt of 100): target 1.56 ms/token, draft 0.25 ms/token, so c = 0.16.

Expected time on 2 dedicated CPU cores (estimated from short runs on a shared machine: a
target step of 8192 padded tokens, ~5.6k real tokens, took 2.5 CPU-seconds, so ~1.3-1.5 s
of 2-core wall time; the draft step, which includes the frozen target's forward pass, about
0.55 of that; training examples fill ~69% of the padded tokens):

  corpus   ~30 s to mine, then cached: 17.4k completion + 16.5k docsum train pairs (29.3k
           examples after caps, ~3.9M real tokens, ~940 steps per epoch), 939 + 890
           validation pairs (stdlib of Python 3.11 + the packages below)
  target   3000 steps (~3.2 epochs), ~1.3-1.5 h; the train step traces once per bucket shape
           (16 shapes, ~10 s each) after every (re)start. (The shipped target was trained
           with a 4500-step schedule to step 1800, where its validation loss had stopped
           improving at the peak learning rate (4.49 at step 1000, 4.54 at 1500), then
           resumed with this 3000-step schedule, so its learning rate stepped down from
           7.4e-4 to 4.7e-4 at step 1800; a run from scratch decays smoothly.)
  draft    target's greedy continuations of 2048 training prompts (~5-10 min, cached), then
           2000 steps, ~30 min
  export   ~2 min: bfloat16 safetensors, acceptance on 64 held-out prompts at temperature 0
           and 1 (k=4, 64 new tokens), batch-1 latency on 8 prompts.

Measured here (the shipped pair; `tfspec/zoo/tiny-code-{target,draft}/MODEL_CARD.md`, also
in `WORKDIR/export/metrics.json`): target 3000 steps (3.20 epochs) in 102 min, final train
loss 3.830, held-out loss 4.075 nats/token; draft 2000 steps (2.01 epochs) in 36 min,
held-out label loss 4.378; acceptance on 64 held-out prompts (k = 4, 64 new tokens) 0.773 at
temperature 0 and 0.403 at temperature 1 (beta 0.909 / 0.662, 3.95 / 2.54 tokens per
round). For reference, 150 steps of the target (inside a 500-step warm-up) reached a
validation loss of 5.6 nats/token (ln 8192 = 9.0 at initialisation).
On a machine shared with other jobs everything takes proportionally longer.
"""

import ml_collections

from configs import common

VARIANTS = (None, "smoke")

_TARGET_STEPS = 3000
_DRAFT_STEPS = 2000


def _t5(d_model, num_heads, d_ff, num_layers, num_decoder_layers, tie):
    return dict(vocab_size=8192, d_model=d_model, d_kv=64, num_heads=num_heads, d_ff=d_ff,
                num_layers=num_layers, num_decoder_layers=num_decoder_layers,
                feed_forward_proj="gated-gelu", tie_word_embeddings=tie,
                relative_attention_num_buckets=32, relative_attention_max_distance=128,
                layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0)


def _stage(steps, learning_rate, warmup_steps, eval_every):
    return ml_collections.ConfigDict(dict(
        steps=steps, learning_rate=learning_rate, warmup_steps=warmup_steps, decay="cosine",
        final_fraction=0.1, weight_decay=0.05, clip_norm=1.0, eval_every=eval_every,
        checkpoint_every=100, log_every=25, keep=2))


def get_config(arg=None):
    """Returns the recipe; `arg` "smoke" gives tiny shapes and a few steps (tests)."""
    return build_config(common.variant(arg, "zoo_tiny_code", ("full", "smoke"),
                                       default="full"))


def build_config(arg: str = "full"):
    """The recipe of variant `arg` ("full" or "smoke"), already parsed (other recipes that
    start from this one call it, so that each config parses only its own ARG)."""
    config = ml_collections.ConfigDict()
    config.workdir = "~/.cache/tfspec/train/zoo_tiny_code"

    config.data = ml_collections.ConfigDict(dict(
        # Installed packages mined after the standard library (all are tfspec dependencies).
        # setuptools and pip are left out: they vendor copies of standard-library modules.
        extra_packages=("numpy", "scipy", "keras", "keras_hub", "apache_beam", "matplotlib"),
        corpus_seed=0,
        tokenizer="",  # "" = the shipped tfspec/zoo/assets/tiny-code/spiece.model
        tasks=("completion", "docsum"),
        max_encoder_length=512,
        max_target_length=256,
        encoder_buckets=(64, 128, 256, 512),
        target_buckets=(32, 64, 128, 256),
        batch_tokens=8192,
        limit=None,  # records per task and split (smoke runs)
        validation_limit=None,
    ))

    config.model = ml_collections.ConfigDict(dict(
        target=_t5(384, 6, 1024, 4, 4, tie=False),
        draft=_t5(256, 4, 1024, 2, 1, tie=True),
    ))
    config.seeds = ml_collections.ConfigDict(dict(
        target=0, draft=1, target_data=0, draft_data=1))

    config.target = _stage(_TARGET_STEPS, 1e-3, 300, eval_every=500)
    config.draft = _stage(_DRAFT_STEPS, 1e-3, 200, eval_every=500)
    config.draft.label_weight = 0.1
    config.draft.temperature = 1.0
    # On-policy data: the target's greedy continuations of this many training prompts are
    # added to the draft's training examples (generated once, cached in the workdir).
    config.draft.generated_prompts = 2048
    config.draft.generated_max_new_tokens = 128
    config.draft.generated_batch_size = 32
    config.draft.generated_temperature = 0.0

    config.export = ml_collections.ConfigDict(dict(
        target_name="tiny-code-target",
        draft_name="tiny-code-draft",
        weights="best",  # "best" validation loss or "final"
        dtype="bfloat16",
        max_total_mb=60.0,
        num_prompts=64,
        max_new_tokens=64,
        k=4,
        batch_size=16,
        latency_prompts=8,
    ))

    if arg == "smoke":
        config.workdir = "~/.cache/tfspec/train/zoo_tiny_code_smoke"
        config.data.extra_packages = ()
        config.data.limit = 64
        config.data.validation_limit = 16
        config.data.max_encoder_length = 128
        config.data.max_target_length = 64
        config.data.encoder_buckets = (32, 128)
        config.data.target_buckets = (16, 64)
        config.data.batch_tokens = 1024
        config.model.target = _t5(64, 2, 128, 2, 2, tie=False)
        config.model.draft = _t5(32, 2, 64, 1, 1, tie=True)
        config.draft.generated_prompts = 8
        config.draft.generated_max_new_tokens = 8
        config.draft.generated_batch_size = 4
        for stage in (config.target, config.draft):
            stage.steps = 20
            stage.warmup_steps = 5
            stage.eval_every = 10
            stage.checkpoint_every = 5
            stage.log_every = 5
        config.export.num_prompts = 8
        config.export.max_new_tokens = 16
        config.export.latency_prompts = 2
    return config

