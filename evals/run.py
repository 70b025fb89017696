r"""Evaluates a target/draft pair on a task: `python -m evals.run --task humaneval --k 4`.

Runs the baseline (k = 0) and the speculative run (k = --k) side by side on the same
examples as a Beam pipeline (`pipelines.runner`, DirectRunner by default), and writes
summary.json, examples.jsonl (one line per example, sample and mode), sweep.json (with
--k_sweep only), dead_letter.jsonl and run_config.json to --output_dir (fields:
docs/design.md section 6). The installed command `tfspec-eval` is the same program.

Examples:

  python -m evals.run --task humaneval --k 4 --limit 20 --max_new_tokens 128
  python -m evals.run --task humaneval --k_sweep 0,1,2,3,4,5,6,7 --temperature 0
  python -m evals.run --task humaneval --num_samples 10 --temperature 0.8 --pass_at 1,10
  python -m evals.run --task humaneval --completions samples.jsonl      # score only
  python -m evals.run --task humaneval --output_dir runs/x --resume     # continue a run
  python -m evals.run --config configs/NAME.py --limit 5                # flags override
  python -m evals.run --task humaneval --direct_num_workers 2 \
      --direct_running_mode multi_processing                            # Beam options
  python -m evals.run --list_tasks                                      # the tasks

Flags this program does not define are passed to Beam's PipelineOptions. Bad input
(unknown task, k < 0, pass@k > num_samples, missing model or data, vocabulary mismatch,
unwritable output folder, ...) prints one line on stderr and exits with status 2 before
anything is written.
"""

import sys

from evals import cli
from evals.orchestration import flags  # Light: no TensorFlow, no Beam.
from evals.orchestration.spec import UsageError

PROG = "python -m evals.run"


def main(argv=None, prog: str = PROG) -> int:
    """Runs `python -m evals.run ARGS`; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, spec = flags.parse(argv, prog, __doc__)
    except UsageError as e:
        return cli.usage_error("evals.run", e)
    if spec is None:
        print(flags.list_tasks())
        return 0
    # Deferred: the command imports Beam and TensorFlow, which a bad flag never waits for.
    from evals.orchestration import command  # pylint: disable=import-outside-toplevel
    return command.run_command(spec, verbose=args.verbose)


def console_main() -> None:
    """The `tfspec-eval` console command (setup.py entry point): evals.run itself."""
    sys.exit(main(prog="tfspec-eval"))


if __name__ == "__main__":
    sys.exit(main())
