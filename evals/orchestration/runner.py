"""Runs an evaluation: validate everything, then the Beam pipeline, then report.

    prepared = prepare(spec)     # UsageError on bad input; writes nothing
    summary = execute(prepared)  # creates the output folder and runs the pipeline

`prepare` checks every input before anything is written: Beam options, the output folder
(writable, not an existing run unless --resume, the same settings when resuming), the data,
the models and tokenizer (loaded once; in-process runners reuse them), the sampling
transform, the sandbox (for code tasks), the decode buffers that --max_new_tokens and
--batch_size imply, that no live run holds the folder, and the journal of a resumed run
(each reused line a complete record). `execute` creates the folder, locks it for the whole
run (`pipelines.run_lock`) and checks it again under the lock, records the settings in
run_config.json, runs the pipeline
(`pipelines.evaluation`) with a progress bar that follows examples.jsonl, and returns the
summary the pipeline wrote. A signal or a full disk during the run ends it with one line
(`pipelines.faults`).

TensorFlow is imported only when models are loaded, so most bad input is reported quickly.
"""

import contextlib
import dataclasses
import os
from typing import Any, List, Optional, Tuple

from apache_beam.options import pipeline_options as beam_options

from evals import datasources
from evals import memory_maps
from evals import provenance
from evals import records
from evals import summary as summary_lib
from evals.orchestration import plan as run_plan
from evals.orchestration import spec as run_spec_lib
from evals import tasks
from evals.orchestration.spec import RunSpec
from evals.orchestration.spec import UsageError
from pipelines import faults
from pipelines import journal as journal_lib
from pipelines import outputs
from evals.orchestration import progress as progress_lib
from pipelines import run_lock

# Models with more parameter bytes than this are shared among the processes of a worker
# machine (RunInference's large_model) instead of loaded once per process.
LARGE_MODEL_BYTES = 2 << 30
RUNS_DIR = "runs"


@dataclasses.dataclass
class PreparedRun:
    """A validated run, ready to execute."""

    spec: RunSpec
    options: beam_options.PipelineOptions
    output_dir: str
    plan: run_plan.RunPlan
    model_spec: Optional[Any]  # pipelines.generation.ModelSpec
    large_model: bool
    journal: journal_lib.Journal
    num_programs: int = 0  # Decoding programs this process compiles: modes x prompt buckets.


def pipeline_options(spec: RunSpec) -> beam_options.PipelineOptions:
    """Beam options from --runner and the pass-through arguments.

    Raises:
      UsageError: an argument that neither evals.run nor any Beam option knows.
    """
    args = [f"--runner={spec.runner}", *spec.beam_args]
    unknown = unknown_beam_args(args)
    if unknown:
        raise UsageError(f"unknown flag {unknown[0]}: neither an evals.run flag nor a Beam "
                         f"pipeline option (see python -m evals.run --help)")
    return beam_options.PipelineOptions(args)


def unknown_beam_args(args: List[str]) -> List[str]:
    """The arguments no Beam PipelineOptions class accepts."""
    parser = beam_options._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
    seen = set()
    for cls in beam_options.PipelineOptions.__subclasses__():
        if cls.__name__ in seen:
            continue
        seen.add(cls.__name__)
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(args)
    return [a for a in unknown if a.startswith("-")] or unknown


def default_output_dir(spec: RunSpec) -> str:
    return os.path.join(RUNS_DIR, provenance.timestamp_folder_name(spec.task))


def model_spec_for(spec: RunSpec):
    """The `pipelines.generation.ModelSpec` of a run."""
    from pipelines import generation  # pylint: disable=import-outside-toplevel
    return generation.ModelSpec(target=spec.target,
                                draft=spec.draft if spec.uses_draft else None,
                                tokenizer=spec.tokenizer, tpu=spec.tpu,
                                prompt_add_eos=spec.prompt_eos, dtype=spec.dtype)


def prepare(spec: RunSpec) -> PreparedRun:
    """Validates a run completely without writing anything (see the module docstring).

    Raises:
      UsageError: one-line description of the first problem found.
    """
    options = pipeline_options(spec)
    output_dir = spec.output_dir or default_output_dir(spec)
    problem = outputs.check_output_dir(output_dir, spec.resume)
    if problem:
        raise UsageError(problem)
    try:
        run_lock.check(output_dir)
    except run_lock.RunLockedError as e:
        raise UsageError(e.strerror) from None
    if spec.resume:
        _check_same_run(spec, output_dir)
    task = tasks.get_task(spec.task)
    examples = run_plan.load_examples(spec)
    completions = None
    model_spec = None
    large_model = False
    num_programs = 0
    if spec.completions:
        completions = run_plan.load_completions(spec, examples)
    else:
        import tfspec  # pylint: disable=import-outside-toplevel
        from pipelines import generation  # pylint: disable=import-outside-toplevel
        try:
            tfspec.Sampling(**spec.sampling)
        except ValueError as e:
            raise UsageError(str(e)) from None
        model_spec = model_spec_for(spec)
        # Remote workers connect to their own TPU; here the models are only checked.
        local = run_spec_lib.is_local_runner(spec.runner)
        try:
            models = generation.load_models(
                model_spec if local else dataclasses.replace(model_spec, tpu=None))
        except (OSError, ValueError) as e:
            raise UsageError(datasources.one_line(e, 400)) from None
        large_model = models.num_parameters() * 4 > LARGE_MODEL_BYTES
        _check_decode_memory(spec, models)
        _check_draft_k(spec, models)
        if local:
            num_programs = len(spec.modes) * len(_prompt_buckets(examples, models, spec))
    if task.executes_code and run_spec_lib.is_local_runner(spec.runner):
        _probe_sandbox()
    journal = journal_lib.Journal(output_dir)
    finished = []
    if spec.resume:
        try:
            finished = journal.read_lines(records.line_problem)
        except (journal_lib.JournalError, OSError) as e:
            raise UsageError(datasources.one_line(e)) from None
    plan = run_plan.make_plan(spec, examples, finished, completions)
    return PreparedRun(spec=spec, options=options, output_dir=output_dir, plan=plan,
                       model_spec=model_spec, large_model=large_model, journal=journal,
                       num_programs=num_programs)


def _prompt_buckets(examples, models, spec: RunSpec) -> set:
    """The prompt buckets (`tfspec.generate`'s padded widths) of the run's examples."""
    from tfspec import generation as tfspec_generation  # pylint: disable=import-outside-toplevel
    return {tfspec_generation.prompt_bucket(
        len(models.tokenizer.encode(e.prompt, add_eos=spec.prompt_eos)) or 1)
        for e in examples}


def memory_map_note(num_programs: int, path: Optional[str] = None) -> Optional[str]:
    """`evals.memory_maps.memory_map_note` for a run's modes x prompt buckets (a run it
    stops continues with --resume)."""
    return memory_maps.memory_map_note(num_programs, path,
                                       what="decoding programs (modes x prompt buckets)",
                                       after_stop=" (--resume then continues)")


def _compiled_k(k) -> int:
    """The k a mode's loop is compiled for ("auto": the default `tfspec.AutoDraft().k_max`)."""
    if k == records.AUTO:
        from tfspec import adaptive  # pylint: disable=import-outside-toplevel
        return adaptive.AutoDraft().k_max
    return int(k)


def _check_decode_memory(spec: RunSpec, models) -> None:
    """--max_new_tokens and --batch_size against the decode buffers they imply."""
    from tfspec import memory  # pylint: disable=import-outside-toplevel
    k = max((_compiled_k(k) for _, k in spec.modes), default=0)
    try:
        memory.check_decode_request(models.target, models.draft, spec.batch_size,
                                    spec.max_new_tokens, k)
    except ValueError as e:
        raise UsageError(f"{e} (--max_new_tokens, --batch_size)") from None


def _check_draft_k(spec: RunSpec, models) -> None:
    """--k against what the draft can draft per round (a Medusa draft: one token per head),
    before any example is decoded."""
    check_k = getattr(models.draft, "check_k", None)
    k, mode_k = max(((_compiled_k(k), k) for _, k in spec.modes), default=(0, 0),
                    key=lambda pair: pair[0])
    if check_k is None or k < 1:
        return
    try:
        check_k(k)
    except ValueError as e:
        if mode_k == records.AUTO:
            raise UsageError(f"--k auto drafts up to k = {k} tokens per round: {e}; use a "
                             f"fixed --k instead") from None
        raise UsageError(f"--k {k}: {e}; lower --k") from None


def _probe_sandbox() -> None:
    from evals import sandbox  # pylint: disable=import-outside-toplevel
    try:
        sandbox.probe_isolation()
    except RuntimeError as e:
        raise UsageError(f"{datasources.one_line(e)}; code tasks need a working sandbox "
                         f"(see evals/sandbox.py)") from None


def _check_same_run(spec: RunSpec, output_dir: str) -> None:
    """--resume must not mix records of different settings in one examples.jsonl."""
    try:
        saved = outputs.read_json(outputs.join(output_dir, outputs.RUN_CONFIG))
        identity = saved["identity"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--resume: cannot read {outputs.RUN_CONFIG} in {output_dir} "
                         f"({datasources.one_line(e, 100)})") from None
    current = spec.identity()
    for name, value in current.items():
        if identity.get(name) != value:
            raise UsageError(f"--resume: the run in {output_dir} used {name}="
                             f"{identity.get(name)!r}, not {value!r}; resume with the same "
                             f"settings or choose a new --output_dir")


def acceptance_record(spec) -> Optional[dict]:
    """summary.json's `acceptance`: the speculative run's rule (`tfspec.acceptance.describe`,
    with `distribution_preserving` and, for typical acceptance, its thresholds and a
    warning), or None when nothing is verified (completions, autoregressive only)."""
    if spec.completions or not spec.uses_draft:
        return None
    from tfspec import acceptance  # pylint: disable=import-outside-toplevel
    return acceptance.describe(acceptance.from_record(spec.acceptance_args))


def summary_header(prepared: PreparedRun, started_at: str) -> dict:
    spec, plan = prepared.spec, prepared.plan
    completions = bool(spec.completions)
    return {
        "task": spec.task,
        "k": None if completions else spec.k,
        "target": None if completions else spec.target,
        "dtype": None if completions else (spec.dtype or "float32"),
        "draft": spec.draft if spec.uses_draft else None,
        "sampling": None if completions else spec.sampling,
        "acceptance": acceptance_record(spec),
        "seed": spec.seed,
        "num_examples": len({e.id for e in plan.examples} if not completions else
                            {item.id for item, _ in plan.completions}
                            | {line["id"] for line in plan.resumed}),
        "num_samples": plan.num_samples,
        "versions": provenance.versions(),
        "git_commit": provenance.git_commit(),
        "started_at": started_at,
    }


def evaluation_config(prepared: PreparedRun, started_at: str):
    """The `pipelines.evaluation.EvaluationConfig` of a prepared run."""
    from pipelines import evaluation  # pylint: disable=import-outside-toplevel
    from pipelines import generation  # pylint: disable=import-outside-toplevel
    spec = prepared.spec
    task = tasks.get_task(spec.task)
    return evaluation.EvaluationConfig(
        task=spec.task, output_dir=prepared.output_dir, modes=spec.modes,
        sweep_ks=spec.k_sweep, pass_at=spec.pass_at,
        header=summary_header(prepared, started_at), model_spec=prepared.model_spec,
        inference_args=generation.inference_args(spec.modes, spec.sampling, spec.seed,
                                                 spec.max_new_tokens,
                                                 acceptance=spec.acceptance_args),
        batch_size=spec.batch_size, large_model=prepared.large_model,
        journal_backend=prepared.journal.backend,
        # One sandbox per record; records of different workers run in parallel anyway.
        score_options={"workers": 1} if task.executes_code else {})


def finished_summary(prepared: PreparedRun) -> Optional[dict]:
    """summary.json of a resumed run with nothing left to do, else None.

    Finished means: every record of the run is in examples.jsonl, and summary.json (and
    sweep.json for a sweep) were written for the same examples, samples and modes. Such a
    run is left exactly as it is: no file is rewritten, the calibration is not measured
    again, and summary.json keeps the timestamps of the run that produced it.
    """
    spec, plan = prepared.spec, prepared.plan
    if not spec.resume or plan.pending_records:
        return None
    try:
        summary = outputs.read_json(outputs.join(prepared.output_dir, outputs.SUMMARY))
    except (OSError, ValueError):
        return None
    header = summary_header(prepared, started_at="")
    expected_modes = {m for m, _ in spec.modes if m in _SUMMARY_MODES}
    same = (isinstance(summary, dict)
            and summary.get("num_examples") == header["num_examples"]
            and summary.get("num_samples") == header["num_samples"]
            and set(summary.get("runs") or {}) == expected_modes)
    if not same:
        return None
    if spec.k_sweep and not outputs.exists(outputs.join(prepared.output_dir, outputs.SWEEP)):
        return None
    return summary


# Modes listed under summary.json's `runs` (the other Ks of a sweep are in sweep.json).
_SUMMARY_MODES = (records.SPECULATIVE, records.AUTOREGRESSIVE, records.COMPLETIONS)


def execute(prepared: PreparedRun, progress: bool = True) -> dict:
    """Creates the output folder, runs the pipeline, returns summary.json's content.

    A resumed run that is already finished (`finished_summary`) is not run again: its
    summary is returned and nothing is written.

    The folder is locked for the whole run (`pipelines.run_lock`).

    Raises:
      UsageError: another run holds the folder, or started a run in it since `prepare`.
      faults.Interrupted: SIGINT or SIGTERM (a KeyboardInterrupt; finished records kept).
      faults.OutputFullError: the folder's disk is full (finished records kept).
    """
    from pipelines import evaluation  # pylint: disable=import-outside-toplevel
    finished = finished_summary(prepared)
    if finished is not None:
        return finished
    spec, plan = prepared.spec, prepared.plan
    output_dir = prepared.output_dir
    started_at = provenance.now()
    with faults.guard(output_dir):
        outputs.makedirs(output_dir)
        with _locked(output_dir):
            _recheck_under_lock(spec, output_dir)
            if not spec.resume:
                outputs.write_json(outputs.join(output_dir, outputs.RUN_CONFIG),
                                   {"identity": spec.identity(), "spec": spec.to_dict(),
                                    "created_at": started_at})
            config = evaluation_config(prepared, started_at)
            references = {e.id: e.reference for e in plan.examples}
            resumed: List[Tuple[dict, str]] = [
                records.sanitize((line, references.get(line["id"], "")))
                for line in plan.resumed]
            with progress_lib.JournalProgress.for_work(prepared.journal, plan.pending_keys(),
                                                       enabled=progress):
                evaluation.run(config, prepared.options, plan.work, plan.completions, resumed)
            return outputs.read_json(outputs.join(output_dir, outputs.SUMMARY))


@contextlib.contextmanager
def _locked(output_dir: str):
    """`run_lock.hold`, with a folder held by another run as a UsageError."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(run_lock.hold(output_dir))
        except run_lock.RunLockedError as e:
            raise UsageError(e.strerror) from None
        yield


def _recheck_under_lock(spec: RunSpec, output_dir: str) -> None:
    """`prepare`'s folder checks again, now that no other run can change the folder.

    Two runs started together into one new folder both pass `prepare`; the one that gets
    the lock second must not write its records into the first one's run.
    """
    problem = outputs.check_output_dir(output_dir, spec.resume)
    if problem:
        raise UsageError(problem)
    if spec.resume:
        _check_same_run(spec, output_dir)


def run(spec: RunSpec, progress: bool = True) -> Tuple[str, dict]:
    """prepare + execute; returns (output folder, summary)."""
    prepared = prepare(spec)
    return prepared.output_dir, execute(prepared, progress=progress)


def describe(output_dir: str, summary: dict) -> str:
    """A few lines for the terminal: quality, speed-up, acceptance, where the files are."""
    lines = [f"{summary.get('task')}: {summary.get('num_examples')} examples x "
             f"{summary.get('num_samples')} samples -> {output_dir}"]
    for mode, entry in (summary.get("runs") or {}).items():
        quality = ", ".join(f"{name} {_fmt(value)}"
                            for name, value in (entry.get("quality") or {}).items()
                            if not name.endswith(("_low", "_high")))
        parts = [f"  {mode:<15} {quality}"]
        latency = entry.get("latency") or {}
        if latency.get("ms_per_token") is not None:
            parts.append(f"{latency['ms_per_token']:.2f} ms/token")
        accept = entry.get("acceptance") or {}
        if accept.get("acceptance_rate") is not None:
            parts.append(f"acceptance {accept['acceptance_rate']:.3f}")
        if entry.get("predicted_speedup") is not None:
            parts.append(f"formula speed-up {entry['predicted_speedup']:.2f}x")
        if entry.get("calibrated_speedup") is not None:
            parts.append(f"calibrated speed-up {entry['calibrated_speedup']:.2f}x")
        lines.append("; ".join(parts))
    if summary.get("speedup") is not None:
        matched = summary.get("matched_speedup")
        sampled = (summary.get("sampling") or {}).get("temperature")
        lines.append(f"  measured speed-up {summary['speedup']:.2f}x"
                     + (f" ({matched:.2f}x at one request length: the modes sampled "
                        f"answers of other lengths)" if matched is not None and sampled
                        else ""))
    acceptance = summary.get("acceptance") or {}
    if acceptance.get("distribution_preserving") is False:
        lines.append(f"  NOTE: {acceptance.get('note')} (epsilon {acceptance.get('epsilon')}, "
                     f"delta {acceptance.get('delta')})")
    why = summary_lib.why_line(summary)
    if why:
        lines.append(f"  {why}")
    if summary.get("num_failed"):
        lines.append(f"  {summary['num_failed']} failed (see {outputs.DEAD_LETTER}; "
                     f"--resume retries them)")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


__all__ = ["PreparedRun", "UsageError", "describe", "execute", "finished_summary", "prepare",
           "run"]
