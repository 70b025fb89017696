r"""Leviathan et al. Table 2 rows: T5-XXL / T5-small draft, WMT En-De, temperature 0 / 1, k=7.

Command (from the repository root):

    python -m evals.run --config configs/leviathan_t5xxl_wmt_ende.py:t0 --tpu local \
        --output_dir runs/leviathan_t5xxl_wmt_ende_t0
    python -m evals.run --config configs/leviathan_t5xxl_wmt_ende.py:t1 --tpu local \
        --output_dir runs/leviathan_t5xxl_wmt_ende_t1
    python -m evals.report runs/leviathan_t5xxl_wmt_ende_t0 runs/leviathan_t5xxl_wmt_ende_t1 \
        --out reports/leviathan_t5xxl_wmt_ende

`arg` (required) picks the published row: "t0" (temperature 0) or "t1" (temperature 1).

Published (Leviathan et al. 2022, Table 2; T5-XXL 11B target, T5-small draft, batch size 1,
one TPU v4, against T5X), at k = 7:

  t0  alpha = 0.75, walltime speed-up 3.4x
  t1  alpha = 0.62, walltime speed-up 2.6x

Expect alpha near the published value and a speed-up approaching it only on comparable
hardware (a TPU v4 at batch 1, where the 11B decode is memory-bound); the report puts the
published row beside ours.

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

Data: WMT En-De test set (newstest2014), `wmt14_translate/de-en`. TFDS (default): prepared
in the TFDS data_dir, `--data_path ~/tensorflow_datasets`; or `--data_source hf --data_path
HF_CACHE` (Hugging Face `wmt14`, de-en); or `--data_source local --data_path
'ende_{split}.jsonl'` with fields en/de. Quality is BLEU.

Measured here: nothing yet. This row needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
"""

from configs import common

TEMPERATURES = {"t0": 0.0, "t1": 1.0}
VARIANTS = tuple(TEMPERATURES)


def get_config(arg=None):
    """evals.run flag values of the published row `arg`: "t0" or "t1" (required)."""
    arg = common.variant(arg, "leviathan_t5xxl_wmt_ende", VARIANTS)
    return common.run_config(
        task="wmt_ende",
        target="hf://google-t5/t5-11b",
        draft="hf://google-t5/t5-small",
        prompt_eos=True,
        k=7,
        temperature=TEMPERATURES[arg],
        max_new_tokens=128,
    )
