r"""Chen et al. Table 1 row: XSum, nucleus sampling (top_p 0.8), K=4, T5-family stand-in.

Command (from the repository root):

    python -m evals.run --config configs/chen_xsum_nucleus.py --tpu local \
        --output_dir runs/chen_xsum_nucleus
    python -m evals.report runs/chen_xsum_nucleus --out reports/chen_xsum_nucleus

Published (Chen et al. 2023, Table 1; Chinchilla 70B target, 4B draft, K = 4, batch size 1,
16 TPU v4): ROUGE-2 0.112 autoregressive vs 0.114 speculative (11.2 / 11.4 in our x100
scale), 14.1 vs 7.52 ms/token, speed-up 1.92x. What should carry over: the baseline and
speculative ROUGE-2 agree within their bootstrap bounds (exactness), and a speed-up of the
same order when the target's decode is memory-bound (TPU, batch 1). ROUGE itself will
differ (other models, zero-shot prompt).

Models: Chinchilla and its 4B draft are not public. The nearest public T5-family pair is
`hf://google/flan-t5-xxl` (11B target) with `hf://google/flan-t5-small` (77M draft): one
shared SentencePiece vocabulary (exact speculative sampling needs it), a large size ratio
like the paper's (which keeps the draft cost ratio c small), and instruction tuning, so the
`summarize: ` prompt works without fine-tuning. `prompt_eos` is on (public T5 checkpoints
were trained with EOS closing the input). `temperature 1, top_p 0.8` is the paper's nucleus
setting, applied to both models.

Hardware: one TPU v4 chip or larger (`--tpu local` on a Cloud TPU VM); flan-t5-xxl needs
~22 GB in bfloat16. On a CPU only for smoke checks (`--limit 2 --max_new_tokens 16`).
Models download from the Hugging Face Hub on first use (network).

Data: XSum test split (11,334 articles; the paper used 11,305 sequences). TFDS (default)
needs a manual download into the TFDS data_dir: `--data_path ~/tensorflow_datasets`; or
`--data_source hf --data_path HF_CACHE` (`EdinburghNLP/xsum`); or `--data_source local
--data_path 'xsum_{split}.jsonl'` with fields document/summary/id. Quality is ROUGE (x100)
with bootstrap bounds; the paper's headline is ROUGE-2. 128 new tokens at most, as in the
paper.

Measured here: nothing yet. This row needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
"""

from configs import common

VARIANTS = (None,)


def get_config(arg=None):
    """evals.run flag values of this published row (takes no `arg`)."""
    common.variant(arg, "chen_xsum_nucleus", ())
    return common.run_config(
        task="xsum",
        target="hf://google/flan-t5-xxl",
        draft="hf://google/flan-t5-small",
        prompt_eos=True,
        k=4,
        temperature=1.0,
        top_p=0.8,
        max_new_tokens=128,
    )
