r"""`zoo:tiny-code-medusa`: Medusa heads for the embedded target.

Trains `tfspec.models.MedusaHeads` for the frozen `zoo:tiny-code-target` on the recipe's code
corpus plus the target's own sampled and greedy continuations, then exports them next to
their target:

    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_medusa.py \
        --stage medusa          # resumable: re-run the same command
    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_medusa.py \
        --stage medusa_export   # writes tfspec/zoo/tiny-code-medusa/

Variants (`:ARG`): "full" (default; the shipped heads), "smoke" (tiny shapes, a few steps;
tests pass a smoke target with --set medusa.target_from=DIR).

The heads: 4 (k <= 4), each a residual block of hidden width `d_ff` on the fuse of the
target's final decoder state and the embedding of the last committed token, then the
target's LM head (bound, not stored) restricted to the `draft_vocab_size` most frequent
training tokens.
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
    section = zoo_tiny_code._stage(1000, 1e-3, 50, eval_every=250)  # pylint: disable=protected-access
    section.target_from = "zoo:tiny-code-target"
    section.compare_draft = "zoo:tiny-code-draft"  # measured beside it at export
    section.heads = 4
    section.d_ff = 1024
    section.reads_token = True
    section.draft_vocab_size = 2048
    section.head_decay = 0.8
    section.sampled_prompts = 2048
    section.sampled_temperature = 1.0
    section.greedy_prompts = 1024
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
    return config
