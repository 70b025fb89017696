r"""`zoo:tiny-code-medusa`: Medusa heads for the embedded target.

Trains `tfspec.models.MedusaHeads` for the frozen `zoo:tiny-code-target` on the recipe's code
corpus plus the target's own sampled and greedy continuations, then exports them next to
their target:

    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_medusa.py \
        --stage medusa          # resumable: re-run the same command
    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_medusa.py \
        --stage medusa_export   # writes tfspec/zoo/tiny-code-medusa/

Variants (`:ARG`): "full" (default; the shipped heads), "smoke" (tiny shapes, a few steps, on
the workdir's own target stage; tests train the smoke target of configs/zoo_tiny_code.py
first).

The heads: 4 (k <= 4), each a residual block of hidden width `d_ff` on the fuse of the
target's final decoder state and the embedding of the last committed token, then the
target's LM head (bound, not stored) restricted to the `draft_vocab_size` most frequent
training tokens.

Measured here (2-core CPU, partly shared with test runs, 2026-12-03): 600 steps (0.60
epochs of the corpus plus the target's continuations of 2048 prompts at T = 1 and 512
greedy) in 39 min; 3,444,992 parameters, 6.6 MB bfloat16. Held-out, teacher-forced overlap
sum_x min(p, q_i) per head: 0.646, 0.367, 0.322, 0.311 (greedy match 0.562, 0.237, 0.168,
0.143). Through `tfspec.generate` on 64 held-out prompts, k = 4, 64 new tokens, beside the T5
draft on the same prompts: beta 0.723 at T = 0 and 0.498 at T = 1 (T5 draft 0.916 and
0.639); tokens per round 2.76 / 1.93 (T5 draft 3.95 / 2.41). The later heads see the
target's state one to three tokens back and agree far less than the first.
"""

from configs import common
from configs import zoo_tiny_code

VARIANTS = ("full", "smoke")


def get_config(arg=None):
    """Returns the recipe; `arg` "smoke" gives tiny shapes and a few steps (tests)."""
    arg = common.variant(arg, "zoo_tiny_code_medusa", VARIANTS, default="full")
    config = zoo_tiny_code.build_config(arg)
    config.workdir = ("~/.cache/tfspec/train/zoo_tiny_code_medusa" if arg == "full"
                      else "~/.cache/tfspec/train/zoo_tiny_code_medusa_smoke")
    config.seeds.medusa = 5
    config.seeds.medusa_data = 5
    section = zoo_tiny_code._stage(  # pylint: disable=protected-access
        600, 1e-3, 50, eval_every=200)
    section.target_from = "zoo:tiny-code-target"
    section.compare_draft = "zoo:tiny-code-draft"  # measured beside it at export
    section.heads = 4
    section.d_ff = 1024
    section.reads_token = True
    section.draft_vocab_size = 2048
    section.head_decay = 0.8
    section.sampled_prompts = 2048
    section.sampled_temperature = 1.0
    section.greedy_prompts = 512
    section.sampled_max_new_tokens = 128
    section.sampled_batch_size = 32
    config.medusa = section
    config.export.medusa_name = "tiny-code-medusa"
    config.export.medusa_max_mb = 15.0
    if arg == "smoke":
        section.target_from = ""
        section.compare_draft = ""
        section.heads = 3
        section.d_ff = 32
        section.draft_vocab_size = 200
        section.steps = 6
        section.warmup_steps = 2
        section.eval_every = 3
        section.checkpoint_every = 3
        section.log_every = 2
        section.sampled_prompts = 4
        section.greedy_prompts = 2
        section.sampled_max_new_tokens = 8
        section.sampled_batch_size = 4
    # The export measures acceptance at export.k, which the heads must cover.
    config.export.k = min(int(config.export.k), int(section.heads))
    return config
