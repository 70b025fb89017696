r"""`zoo:tiny-code-draft-te`: the embedded draft reading the target's encoder output.

Starts from `zoo:tiny-code-draft`, fits a projection from the frozen `zoo:tiny-code-target`'s
encoder output to the draft's own by least squares, then distills the draft's decoder and the
projection from the target with the draft reading the projected target encoder output
(`tfspec.training.target_encoder_draft`); a speculative request then runs one encoder:

    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_draft_te.py \
        --stage target_encoder_draft          # resumable: re-run the same command
    python -m recipes.tiny_code.train --config configs/zoo_tiny_code_draft_te.py \
        --stage target_encoder_draft_export   # writes tfspec/zoo/tiny-code-draft-te/

Variants (`:ARG`): "full" (default), "smoke" (a few steps from the target and draft stages
of the same workdir, which tests train first with configs/zoo_tiny_code.py:smoke).

Measured here (2-core CPU, 2026-12-05), 64 held-out completion prompts, k = 4, 64 new
tokens, batches of 8: the shipped draft reading its own encoder, greedy acceptance 0.734
(beta 0.889), T = 1 0.378 (beta 0.651); reading the target's encoder through the
least-squares projection alone (the stage's starting point, fitted on 1500 training prompts,
R^2 0.30): 0.658 (0.855) and 0.377 (0.637).

The stage as configured (800 steps, peak lr 2e-4, 21 min here; the exported draft measured
by --stage target_encoder_draft_export on 64 held-out completion prompts, k = 4, batches of
16, beside zoo:tiny-code-draft with its own encoder): greedy acceptance 0.802 against 0.811
(beta 0.913 against 0.916), T = 1 0.424 against 0.381 (beta 0.666 against 0.639); held-out
teacher-forced KL 0.404, overlap 0.692 (the draft with its own encoder: 0.407, 0.692). At
peak lr 1e-3 (400 steps) greedy acceptance fell instead.
"""

from configs import common
from configs import zoo_tiny_code

VARIANTS = ("full", "smoke")


def get_config(arg=None):
    """Returns the recipe; `arg` "smoke" gives a few steps (tests)."""
    arg = common.variant(arg, "zoo_tiny_code_draft_te", VARIANTS, default="full")
    config = zoo_tiny_code.build_config(arg)
    config.workdir = ("~/.cache/tfspec/train/zoo_tiny_code_draft_te" if arg == "full"
                      else "~/.cache/tfspec/train/zoo_tiny_code_draft_te_smoke")
    config.seeds.target_encoder_draft_data = 5
    section = zoo_tiny_code._stage(800, 2e-4, 50, eval_every=200)  # pylint: disable=protected-access
    section.target_from = "zoo:tiny-code-target"
    section.init_from = "zoo:tiny-code-draft"
    section.compare_draft = "zoo:tiny-code-draft"  # measured beside it at export
    section.fit_prompts = 1500
    section.divergence = "forward_kl"
    section.temperature = 1.0
    section.label_weight = 0.1
    # The target's greedy continuations, as the draft stage of zoo_tiny_code.py trains on.
    section.generated_prompts = 2048
    section.generated_temperature = 0.0
    section.generated_max_new_tokens = 128
    section.generated_batch_size = 32
    config.target_encoder_draft = section
    config.export.target_encoder_draft_name = "tiny-code-draft-te"
    config.export.target_encoder_draft_max_mb = 15.0
    # --stage target_encoder_adapter writes the least-squares adapter alone beside this draft.
    config.export.adapter_draft_name = "tiny-code-draft"
    if arg == "smoke":
        section.target_from = ""
        section.init_from = ""
        section.compare_draft = ""
        section.fit_prompts = 16
        section.generated_prompts = 4
        section.generated_max_new_tokens = 8
        section.steps = 6
        section.warmup_steps = 2
        section.eval_every = 3
        section.checkpoint_every = 3
        section.log_every = 2
    return config
