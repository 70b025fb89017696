r"""Chen et al. Figure 1: XSum nucleus sampling, K = 0..7, T5-family stand-in.

Command (from the repository root):

    python -m evals.run --config configs/chen_k_sweep.py --tpu local \
        --output_dir runs/chen_k_sweep
    python -m evals.report runs/chen_k_sweep --out reports/chen_k_sweep

  `configs/chen_k_sweep.py:greedy` sweeps greedy decoding instead.

Published (Chen et al. 2023, Figure 1, XSum with Chinchilla 70B and its 4B draft; curves
only, no table): the time of one loop grows about linearly with K, the fraction of the
K + 1 slots that are used falls with K, the mean time to 128 tokens is lowest at K = 3 and
its spread grows with K. The report draws the same panels (mean sequence time with std,
acceptance rate, loop time, and p50/p90/p99 sequence time against K).

Models: `hf://google/flan-t5-xxl` target, `hf://google/flan-t5-small` draft (see
`configs/chen_xsum_nucleus.py`). `prompt_eos` is on.

Hardware: one TPU v4 chip or larger (`--tpu local`); eight passes over the data (K = 0..7),
so use `--limit 500` for a first look. CPU only for smoke checks.

Data: XSum test split, as in `configs/chen_xsum_nucleus.py` (`--data_path
~/tensorflow_datasets` for TFDS, or `--data_source hf`, or `--data_source local
--data_path 'xsum_{split}.jsonl'`). 128 new tokens at most, as in the paper.

Measured here: nothing yet. This sweep needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
The same sweep on the embedded pair, offline, is `configs/zoo_k_sweep.py` (numbers there).
"""

from configs import common

VARIANTS = (None, "nucleus", "greedy")


def get_config(arg=None):
    """evals.run flag values: `arg` "nucleus" (default: T 1, top_p 0.8) or "greedy"."""
    arg = common.variant(arg, "chen_k_sweep", ("nucleus", "greedy"), default="nucleus")
    return common.run_config(
        task="xsum",
        target="hf://google/flan-t5-xxl",
        draft="hf://google/flan-t5-small",
        prompt_eos=True,
        k_sweep="0,1,2,3,4,5,6,7",
        k=4,
        temperature=1.0 if arg == "nucleus" else 0.0,
        top_p=0.8 if arg == "nucleus" else 1.0,
        max_new_tokens=128,
    )
