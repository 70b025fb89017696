r"""Leviathan et al. Table 2 row: T5-XXL / T5-small draft, CNN/DM, temperature 0, k=5.

Command (from the repository root):

    python -m evals.run --config configs/leviathan_t5xxl_cnndm_t0.py --tpu local \
        --output_dir runs/leviathan_t5xxl_cnndm_t0
    python -m evals.report runs/leviathan_t5xxl_cnndm_t0 --out reports/leviathan_t5xxl_cnndm_t0

Published (Leviathan et al. 2022, Table 2; T5-XXL 11B target, T5-small draft, batch size 1,
one TPU v4, against T5X): alpha = 0.65, walltime speed-up 3.1x at k = 5. Expect alpha near
0.65 and a speed-up approaching 3.1x only on comparable hardware (a TPU v4 at batch 1, where the
11B decode is memory-bound); the report puts the published row beside ours.

Models: `hf://google-t5/t5-11b` (target) and `hf://google-t5/t5-small` (draft), the original
T5 ("v1.0") checkpoints. Why not `hf://google/t5-v1_1-xxl`: the paper's drafts (T5-small
77M) suggest T5X's v1.1 checkpoints *fine-tuned* on each task, which are not public; the
public v1.1 checkpoints are pre-trained on C4 only and neither translate nor summarize. The
original T5 checkpoints were pre-trained on a multi-task mixture that includes WMT En-De and
CNN/DailyMail with exactly the task prefixes `evals` uses ("translate English to German: ",
"summarize: "), so they run the task as is, and t5-11b is the same 11B size as T5-XXL. Both
share one SentencePiece vocabulary (required for exact speculative sampling). To use your own
fine-tuned v1.1 pair, override `--target DIR --draft DIR` (tfspec common layout).
`prompt_eos` is on: public T5 checkpoints were trained with EOS closing the input.

Hardware: one TPU v4 chip or larger (`--tpu local` on a Cloud TPU VM, or `--tpu NAME`);
t5-11b needs ~22 GB in bfloat16 (44 GB in float32). On a CPU it runs only for smoke
checks (`--limit 2 --max_new_tokens 16`) and its timings say nothing about the paper.
Models download from the Hugging Face Hub on first use (network), safetensors only.

Data: CNN/DailyMail 3.x test split (11,490 articles). TFDS (default): `cnn_dailymail:3.*.*`
in the TFDS data_dir, `--data_path ~/tensorflow_datasets`; or `--data_source hf --data_path
HF_CACHE` (`abisee/cnn_dailymail` 3.0.0); or `--data_source local --data_path
'cnndm_{split}.jsonl'` with fields article/highlights/id. Quality is ROUGE.
"""

import ml_collections


def get_config(arg=None):
    """evals.run flag values of this published row (`arg` is unused)."""
    del arg
    config = ml_collections.ConfigDict()
    config.task = "cnn_dailymail"
    config.target = "hf://google-t5/t5-11b"
    config.draft = "hf://google-t5/t5-small"
    config.prompt_eos = True
    config.k = 5
    config.temperature = 0.0
    config.top_k = 0
    config.top_p = 1.0
    config.batch_size = 1
    config.max_new_tokens = 128
    config.num_samples = 1
    config.baseline = True
    config.seed = 0
    return config
