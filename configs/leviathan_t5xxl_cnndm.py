r"""Leviathan et al. Table 2 rows: T5-XXL / T5-small draft, CNN/DM, temperature 0 / 1, k=5.

Command (from the repository root):

    python -m evals.run --config configs/leviathan_t5xxl_cnndm.py:t0 --tpu local \
        --output_dir runs/leviathan_t5xxl_cnndm_t0
    python -m evals.run --config configs/leviathan_t5xxl_cnndm.py:t1 --tpu local \
        --output_dir runs/leviathan_t5xxl_cnndm_t1
    python -m evals.report runs/leviathan_t5xxl_cnndm_t0 runs/leviathan_t5xxl_cnndm_t1 \
        --out reports/leviathan_t5xxl_cnndm

`arg` (required) picks the published row: "t0" (temperature 0) or "t1" (temperature 1).

Published (Leviathan et al. 2022, Table 2; T5-XXL 11B target, T5-small draft, batch size 1,
one TPU v4, against T5X), at k = 5:

  t0  alpha = 0.65, walltime speed-up 3.1x
  t1  alpha = 0.53, walltime speed-up 2.3x

Expect alpha near the published value and a speed-up approaching it only on comparable
hardware (a TPU v4 at batch 1, where the 11B decode is memory-bound); the report puts the
published row beside ours.

Models: `hf://google-t5/t5-11b` (target) and `hf://google-t5/t5-small` (draft), the original
T5 checkpoints, whose pre-training mixture includes CNN/DailyMail with the `summarize: `
prefix; see `configs/leviathan_t5xxl_wmt_ende.py` for why this pair stands in for the paper's
fine-tuned T5X models and how to use your own. `prompt_eos` is on.

Hardware: one TPU v4 chip or larger (`--tpu local` or `--tpu NAME`), as in
`configs/leviathan_t5xxl_wmt_ende.py`; on a CPU only for smoke checks (`--limit 2
--max_new_tokens 16`). Models download from the Hugging Face Hub on first use.

Data: CNN/DailyMail 3.x test split (11,490 articles). TFDS (default): `cnn_dailymail:3.*.*`
in the TFDS data_dir, `--data_path ~/tensorflow_datasets`; or `--data_source hf --data_path
HF_CACHE` (`abisee/cnn_dailymail` 3.0.0); or `--data_source local --data_path
'cnndm_{split}.jsonl'` with fields article/highlights/id. Quality is ROUGE.

Measured here: nothing yet. This row needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
"""

from configs import common

TEMPERATURES = {"t0": 0.0, "t1": 1.0}
VARIANTS = tuple(TEMPERATURES)


def get_config(arg=None):
    """evals.run flag values of the published row `arg`: "t0" or "t1" (required)."""
    arg = common.variant(arg, "leviathan_t5xxl_cnndm", VARIANTS)
    return common.run_config(
        task="cnn_dailymail",
        target="hf://google-t5/t5-11b",
        draft="hf://google-t5/t5-small",
        prompt_eos=True,
        k=5,
        temperature=TEMPERATURES[arg],
        max_new_tokens=128,
    )
