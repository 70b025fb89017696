r"""Chen et al. Table 1 row: XSum, greedy decoding, K=4, T5-family stand-in.

Command (from the repository root):

    python -m evals.run --config configs/chen_xsum_greedy.py --tpu local \
        --output_dir runs/chen_xsum_greedy
    python -m evals.report runs/chen_xsum_greedy --out reports/chen_xsum_greedy

Published (Chen et al. 2023, Table 1; Chinchilla 70B target, 4B draft, K = 4, batch size 1,
16 TPU v4): ROUGE-2 0.157 autoregressive vs 0.156 speculative (15.7 / 15.6 in our x100
scale), 14.1 vs 7.00 ms/token, speed-up 2.01x. What should carry over: identical quality
(greedy speculative output equals greedy autoregressive output) and a speed-up of the same
order on memory-bound hardware. ROUGE itself will differ (other models).

Models: `hf://google/flan-t5-xxl` target, `hf://google/flan-t5-small` draft; see
`configs/chen_xsum_nucleus.py` for why this pair stands in for Chinchilla and its draft.
`prompt_eos` is on.

Hardware: one TPU v4 chip or larger (`--tpu local`); CPU only for smoke checks
(`--limit 2 --max_new_tokens 16`). Models download from the Hugging Face Hub on first use.

Data: XSum test split, as in `configs/chen_xsum_nucleus.py` (TFDS manual download with
`--data_path ~/tensorflow_datasets`, or `--data_source hf`, or `--data_source local
--data_path 'xsum_{split}.jsonl'`). 128 new tokens at most, as in the paper.

Measured here: nothing yet. This row needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
"""

from configs import common

VARIANTS = (None,)


def get_config(arg=None):
    """evals.run flag values of this published row (takes no `arg`)."""
    common.variant(arg, "chen_xsum_greedy", ())
    return common.run_config(
        task="xsum",
        target="hf://google/flan-t5-xxl",
        draft="hf://google/flan-t5-small",
        prompt_eos=True,
        k=4,
        temperature=0.0,
        max_new_tokens=128,
    )
