r"""Embedded default on docsum (docstring summaries of Python code), k=4.

Command (from the repository root; runs offline on a CPU):

    python -m evals.run --config configs/zoo_docsum.py:t0 --output_dir runs/zoo_docsum_t0
    python -m evals.run --config configs/zoo_docsum.py:t1 --output_dir runs/zoo_docsum_t1
    python -m evals.report runs/zoo_docsum_t0 runs/zoo_docsum_t1 --out reports/zoo_docsum

  or all embedded-default runs and their report at once: `python -m evals.report_example`.

`arg`: "t0" (default, greedy) or "t1" (temperature 1).

Hardware: any machine; 2 CPU cores take a few minutes (200 examples x 2 modes x <= 48
tokens). Data: the validation split of the project's offline code corpus (default
`--data_source corpus`, mined from installed Python sources; cached after the first use).
Models: the embedded pair (`tfspec/zoo/`, trained by `configs/zoo_tiny_code.py`).

Published numbers it relates to: none directly. It is the summarization analogue of
Leviathan et al.'s CNN/DM rows and Chen et al.'s XSum rows (ROUGE with bootstrap bounds,
baseline vs speculative), on a task the tiny pair was trained for.

Measured here (2-core CPU, the k = 4 entries of `configs/zoo_k_sweep.py`;
`reports/embedded_default/report.md`, made with the loop before the round-cost work of the
README's table): t0 (the same 200 examples): ROUGE-2 2.94 for both runs (greedy speculative
output is the autoregressive output), acceptance 0.56, alpha 0.80, 2.664 -> 2.911 ms/token,
speed-up 0.92x; t1 (its first 60 examples only): ROUGE-2 0.31 autoregressive, 0.59
speculative (intervals [0, 0.79] and [0, 1.34] overlap), acceptance 0.39, speed-up 0.77x.
"""

from configs import common
from configs.zoo_humaneval import temperature_of

VARIANTS = (None, "t0", "t1")


def get_config(arg=None):
    """evals.run flag values; `arg` "t0" (default) or "t1" picks the temperature."""
    return common.run_config(
        task="docsum",
        target="zoo:tiny-code-target",
        draft="zoo:tiny-code-draft",
        k=4,
        temperature=temperature_of(arg, "zoo_docsum"),
        max_new_tokens=48,
        limit=200,
    )
