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
Models: the embedded pair (DESIGN.md section 5).

Published numbers it relates to: none directly. It is the summarization analogue of
Leviathan et al.'s CNN/DM rows and Chen et al.'s XSum rows (ROUGE with bootstrap bounds,
baseline vs speculative), on a task the tiny pair was trained for.
"""

import ml_collections

VARIANTS = (None, "t0", "t1")


def temperature_of(arg) -> float:
    """"t0"/"0"/None -> 0.0, "t1"/"1" -> 1.0."""
    value = (arg or "t0").lstrip("t")
    if value not in ("0", "1"):
        raise ValueError(f"expected 't0' or 't1', got {arg!r}")
    return float(value)


def get_config(arg=None):
    """evals.run flag values; `arg` "t0" (default) or "t1" picks the temperature."""
    config = ml_collections.ConfigDict()
    config.task = "docsum"
    config.target = "zoo:tiny-code-target"
    config.draft = "zoo:tiny-code-draft"
    config.k = 4
    config.temperature = temperature_of(arg)
    config.top_k = 0
    config.top_p = 1.0
    config.batch_size = 1
    config.max_new_tokens = 48
    config.num_samples = 1
    config.limit = 200
    config.baseline = True
    config.seed = 0
    return config
