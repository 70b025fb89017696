r"""Evaluates a target/draft pair on a task: `python -m evals.run --task humaneval --k 4`.

Runs the baseline (k = 0) and the speculative run (k = --k) side by side on the same
examples as a Beam pipeline (`pipelines.runner`, DirectRunner by default), and writes
summary.json, examples.jsonl (one line per example, sample and mode), sweep.json (with
--k_sweep) and dead_letter.jsonl to --output_dir (DESIGN.md section 6).

Examples:

  python -m evals.run --task humaneval --k 4 --limit 20 --max_new_tokens 128
  python -m evals.run --task humaneval --k_sweep 0,1,2,3,4,5,6,7 --temperature 0
  python -m evals.run --task humaneval --num_samples 10 --temperature 0.8 --pass_at 1,10
  python -m evals.run --task humaneval --completions samples.jsonl      # score only
  python -m evals.run --task humaneval --output_dir runs/x --resume     # continue a run
  python -m evals.run --config configs/NAME.py --limit 5                # flags override
  python -m evals.run --task humaneval --direct_num_workers 2 \
      --direct_running_mode multi_processing                            # Beam options

Flags this program does not define are passed to Beam's PipelineOptions. Bad input
(unknown task, k < 0, pass@k > num_samples, missing model or data, vocabulary mismatch,
unwritable output folder, ...) prints one line on stderr and exits with status 2 before
anything is written.
"""

import importlib
import importlib.util
import logging as std_logging
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from evals import run_spec  # noqa: E402  (light: no TensorFlow, no Beam)

FLAGS = flags.FLAGS

flags.DEFINE_string("task", None, "Task: humaneval, xsum, cnn_dailymail, wmt_ende, docsum.")
flags.DEFINE_integer("k", None, "Draft tokens per round; 0 = autoregressive only "
                     f"(default {run_spec.DEFAULT_K}, or the largest K of --k_sweep).")
flags.DEFINE_string("k_sweep", None, "Comma-separated draft lengths to sweep, e.g. 0,1,2,4 "
                    "(writes sweep.json).")
flags.DEFINE_string("target", run_spec.DEFAULT_TARGET, "Target model (tfspec.load_model spec).")
flags.DEFINE_string("draft", run_spec.DEFAULT_DRAFT, "Draft model (tfspec.load_model spec).")
flags.DEFINE_string("tokenizer", None, "Tokenizer (default: the target's spiece.model).")
flags.DEFINE_float("temperature", 0.0, "Sampling temperature; 0 = greedy.")
flags.DEFINE_integer("top_k", 0, "Top-k filtering; 0 disables.")
flags.DEFINE_float("top_p", 1.0, "Nucleus (top-p) filtering; 1 disables.")
flags.DEFINE_integer("num_samples", 1, "Samples per example.")
flags.DEFINE_string("pass_at", None, "Comma-separated k of pass@k (HumanEval), e.g. 1,10; "
                    "default: those of 1,10,100 that --num_samples allows.")
flags.DEFINE_integer("limit", None, "Evaluate the first N examples only.")
flags.DEFINE_integer("batch_size", 1, "Rows per generate call (1: the papers' setting).")
flags.DEFINE_integer("max_new_tokens", run_spec.DEFAULT_MAX_NEW_TOKENS,
                     "Tokens to generate per sample at most.")
flags.DEFINE_integer("seed", 0, "Run seed; each (example, sample) has its own stream under it.")
flags.DEFINE_string("output_dir", None, "Output folder (local or gs://); default: a new "
                    "timestamped folder under runs/.")
flags.DEFINE_boolean("resume", False, "Continue the run in --output_dir: skip finished "
                     "(id, sample, mode) records.")
flags.DEFINE_boolean("baseline", True, "Also run the autoregressive baseline (k = 0) on the "
                     "same examples (for the speed-up).")
flags.DEFINE_string("completions", None, "Score this completions file (JSONL: task_id, "
                    "completion) instead of generating; no model is loaded.")
flags.DEFINE_string("data_source", None, "Where the task's data comes from (task-specific: "
                    "package, local, tfds, hf, corpus).")
flags.DEFINE_string("data_path", None, "Data file(s) or data folder for --data_source.")
flags.DEFINE_string("runner", run_spec.DEFAULT_RUNNER, "Beam runner, e.g. DataflowRunner.")
flags.DEFINE_boolean("calibrate", True, "Measure the draft cost ratio c (draft vs target "
                     "decode step time) for predicted_speedup.")
flags.DEFINE_boolean("prompt_eos", False, "Append EOS to the tokenized prompt (public T5 "
                     "checkpoints expect it; the embedded pair was trained without).")
flags.DEFINE_string("tpu", None, "TPU name or address ('local' on a Cloud TPU VM).")
flags.DEFINE_string("config", None, "Experiment config: configs/NAME.py[:ARG], whose "
                    "get_config() returns a ConfigDict of flag values; explicit flags win.")

RUN_FLAGS = ("task", "k", "k_sweep", "target", "draft", "tokenizer", "temperature", "top_k",
             "top_p", "num_samples", "pass_at", "limit", "batch_size", "max_new_tokens",
             "seed", "output_dir", "resume", "baseline", "completions", "data_source",
             "data_path", "runner", "tpu", "calibrate", "prompt_eos")
EXIT_USAGE = 2


def _usage_error(message) -> int:
    print(f"evals.run: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def load_config(spec: str) -> dict:
    """Flag values of an experiment config `PATH.py[:ARG]` or `MODULE[:ARG]`.

    Raises:
      run_spec.UsageError: missing file, no get_config, or keys that are not flags.
    """
    path, _, arg = spec.partition(":")
    try:
        if path.endswith(".py") or os.path.sep in path:
            if not os.path.isfile(path):
                raise run_spec.UsageError(f"--config file {path} does not exist")
            module_spec = importlib.util.spec_from_file_location("_evals_run_config", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(path)
    except run_spec.UsageError:
        raise
    except Exception as e:  # noqa: BLE001  Any error in the user's config file.
        raise run_spec.UsageError(f"cannot load --config {spec}: {type(e).__name__}: "
                                  f"{e}") from None
    if not hasattr(module, "get_config"):
        raise run_spec.UsageError(f"--config {path} has no get_config() function")
    try:
        config = module.get_config(arg) if arg else module.get_config()
        values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    except Exception as e:  # noqa: BLE001  Any error in the user's get_config.
        raise run_spec.UsageError(f"--config {spec}: get_config failed: {type(e).__name__}: "
                                  f"{e}") from None
    unknown = sorted(set(values) - set(RUN_FLAGS))
    if unknown:
        raise run_spec.UsageError(f"--config {path} sets {unknown[0]!r}, which is not an "
                                  f"evals.run flag (known: {', '.join(RUN_FLAGS)})")
    return values


def flag_values(beam_args) -> dict:
    """The run's values: the config's, overridden by flags given on the command line."""
    values = {}
    if FLAGS.config:
        values.update(load_config(FLAGS.config))
    for name in RUN_FLAGS:
        if FLAGS[name].present or name not in values:
            values[name] = FLAGS[name].value
    values["beam_args"] = list(beam_args)
    values["config"] = FLAGS.config
    return values


class _CapturedStderr:
    """Sends file descriptor 2 to a temporary file (TensorFlow's native start-up logs).

    Python and C++ writers alike are captured; `replay` copies the capture to the real
    stderr (used when something unexpected fails).
    """

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)
        return self

    def replay(self):
        self.restore()
        self._file.seek(0)
        sys.stderr.write(self._file.read().decode("utf-8", "replace"))
        sys.stderr.flush()

    def restore(self):
        """Puts the real stderr back (idempotent)."""
        if self._saved is not None:
            sys.stderr.flush()
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._saved = None

    def __exit__(self, *exc):
        self.restore()
        self._file.close()
        return False


def _quiet_logs() -> None:
    """Keeps the terminal for the progress bar and errors (unless -v was given)."""
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
        # Per-shape retracing notes of tfspec's compiled loops and a Beam note about a
        # memory metric this platform lacks.
        std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)
        std_logging.getLogger().addFilter(_drop_resource_module_note)


def _drop_resource_module_note(record) -> bool:
    return not str(record.msg).startswith("Resource module is not available")


def main(argv) -> int:
    beam_args = argv[1:]
    _quiet_logs()
    try:
        spec = run_spec.build_run_spec(flag_values(beam_args))
    except run_spec.UsageError as e:
        return _usage_error(e)
    with _CapturedStderr() as captured:
        try:
            from pipelines import runner  # pylint: disable=import-outside-toplevel
            prepared = runner.prepare(spec)
        except run_spec.UsageError as e:
            captured.restore()
            return _usage_error(e)
        except BaseException:
            captured.replay()
            raise
    if spec.temperature == 0 and spec.num_samples > 1 and not spec.completions:
        print("evals.run: note: --temperature 0 is greedy decoding: all samples of an example "
              "are identical", file=sys.stderr)
    try:
        summary = runner.execute(prepared)
    except run_spec.UsageError as e:  # Another run holds the folder.
        return _usage_error(e)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (runner's faults.Interrupted).
        print(f"\nevals.run: interrupted; finished records are in {prepared.output_dir}; "
              f"continue with --output_dir {prepared.output_dir} --resume", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except runner.faults.OutputFullError as e:
        print(f"evals.run: error: {e.strerror}", file=sys.stderr)
        return 1
    print(runner.describe(prepared.output_dir, summary))
    return 0


def _parse_flags(argv):
    """absl flags; unknown ones are left for Beam. A bad flag value is a usage error."""
    try:
        return FLAGS(argv, known_only=True)
    except flags.Error as e:
        sys.exit(_usage_error(e))


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
