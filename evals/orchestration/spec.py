"""`RunSpec`: the validated settings of one `python -m evals.run` invocation.

`build_run_spec(values)` turns the flag values (a plain dict, already merged with an
experiment config) into a frozen `RunSpec`, checking everything that needs no model, data or
file system: task name, draft lengths, sample counts, pass@k, sampling ranges. Problems
raise `UsageError`, whose message is one line that says what is wrong and how to fix it;
the entry point prints it and exits with status 2.

Draft lengths of a run (`RunSpec.ks`): the --k run (k > 0, or "auto": adaptive draft
length), the baseline k = 0 when --baseline is on, and every K of --k_sweep (integers, and
"auto"). With --k_sweep and no explicit --k, k is the largest integer K of the sweep.
"""

import dataclasses
from typing import Any, Iterable, Mapping, Optional, Tuple

from evals import records
from evals import tasks

DEFAULT_TARGET = "zoo:tiny-code-target"
DEFAULT_DRAFT = "zoo:tiny-code-draft"
DEFAULT_K = 4
DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_RUNNER = "DirectRunner"
DTYPES = ("float32", "bfloat16")  # What tfspec.load_model(dtype=...) accepts.
ACCEPTANCE_RULES = ("exact", "typical")  # tfspec.acceptance.RULES (kept TensorFlow-free).
LOCAL_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner",
                 "FnApiRunner", "PrismRunner")


class UsageError(ValueError):
    """Bad input from the user; the message is one line (what is wrong, how to fix it)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Settings of an evaluation run (see `evals/run.py` for the flag help).

    Attributes:
      task: name in `evals.tasks.TASKS`.
      k: draft tokens per round of the speculative run (0: autoregressive only), or "auto"
        (`tfspec.generate(k="auto")`).
      k_sweep: extra draft lengths to evaluate (sweep.json; ints and "auto"), () for none.
      target, draft, tokenizer: model specs (`tfspec.load_model`); tokenizer None = target's.
      dtype: dtype the models are loaded in ("float32" or "bfloat16"); None = float32.
      temperature, top_k, top_p: the sampling transform.
      acceptance: the speculative run's verification rule, "exact" or "typical" (Medusa's
        typical acceptance, an opt-in that is not distribution-preserving above T = 0).
      typical_epsilon, typical_delta: typical acceptance's thresholds (None: tfspec's).
      num_samples: samples per example.
      pass_at: the pass@k to report (HumanEval), None for the task's default.
      limit: use the first `limit` examples (None: all).
      batch_size: rows per generate call.
      max_new_tokens: generation budget per row.
      seed: run seed; row streams are keyed by (id, sample) under it.
      output_dir: where the files go (None: a new folder under runs/).
      resume: continue the run in output_dir.
      baseline: also run k = 0 (the autoregressive baseline) on the same examples.
      completions: score this HumanEval-format completions file instead of generating.
      data_source, data_path: where the task's data comes from.
      runner: Beam runner name.
      beam_args: pass-through Beam pipeline options.
      tpu: TPU name/address, or None.
      config: the experiment config the values came from, if any (recorded only).
      calibrate: measure the draft cost ratio c (for predicted_speedup).
      prompt_eos: append EOS to the tokenized prompt (as public T5 checkpoints were
        trained; the embedded pair was trained without).
    """

    task: str
    k: records.DraftLength = DEFAULT_K
    k_sweep: Tuple[records.DraftLength, ...] = ()
    target: str = DEFAULT_TARGET
    draft: Optional[str] = DEFAULT_DRAFT
    tokenizer: Optional[str] = None
    dtype: Optional[str] = None
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    acceptance: str = "exact"
    typical_epsilon: Optional[float] = None
    typical_delta: Optional[float] = None
    num_samples: int = 1
    pass_at: Optional[Tuple[int, ...]] = None
    limit: Optional[int] = None
    batch_size: int = 1
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int = 0
    output_dir: Optional[str] = None
    resume: bool = False
    baseline: bool = True
    completions: Optional[str] = None
    data_source: Optional[str] = None
    data_path: Optional[str] = None
    runner: str = DEFAULT_RUNNER
    beam_args: Tuple[str, ...] = ()
    tpu: Optional[str] = None
    config: Optional[str] = None
    calibrate: bool = True
    prompt_eos: bool = False

    @property
    def ks(self) -> Tuple[records.DraftLength, ...]:
        """Draft lengths to run, ascending, "auto" last (0 = the autoregressive baseline)."""
        if self.completions:
            return ()
        ks = set(self.k_sweep)
        ks.add(self.k)
        if self.baseline:
            ks.add(0)
        return tuple(sorted(ks, key=records.k_order))

    @property
    def modes(self) -> Tuple[Tuple[str, int], ...]:
        """((mode, k), ...) of the run; ("completions", 0) in completions mode."""
        if self.completions:
            return ((records.COMPLETIONS, 0),)
        return records.mode_list(self.ks, self.k)

    @property
    def uses_draft(self) -> bool:
        return any(records.speculates(k) for k in self.ks)

    @property
    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    @property
    def acceptance_args(self) -> Optional[dict]:
        """The rule as `tfspec.acceptance.from_record` reads it; None = exact."""
        if self.acceptance == "exact":
            return None
        return {"rule": self.acceptance, "epsilon": self.typical_epsilon,
                "delta": self.typical_delta}

    def identity(self) -> dict:
        """Settings a resumed run must share with the run it continues (same records)."""
        return {"task": self.task, "k": self.k, "target": self.target,
                "draft": self.draft if self.uses_draft else None,
                "tokenizer": self.tokenizer,
                # float32 is the default: runs recorded before --dtype existed match it.
                "dtype": None if self.dtype in (None, "float32") else self.dtype,
                "sampling": self.sampling, "seed": self.seed,
                # Exact runs (and runs recorded before --acceptance existed) hold None.
                "acceptance": self.acceptance_args if self.uses_draft else None,
                "max_new_tokens": self.max_new_tokens, "prompt_eos": self.prompt_eos,
                "data_source": self.data_source,
                "data_path": self.data_path, "completions": self.completions}

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["k_sweep"] = list(self.k_sweep)
        out["pass_at"] = None if self.pass_at is None else list(self.pass_at)
        out["beam_args"] = list(self.beam_args)
        return out


def is_local_runner(runner: Optional[str]) -> bool:
    """True for runners whose workers share this machine's file system."""
    name = (runner or DEFAULT_RUNNER).split(".")[-1]
    return name in LOCAL_RUNNERS


def parse_int_list(value: Any, flag: str, allow_auto: bool = False) -> tuple:
    """"0,1,2" (or a list of ints) -> (0, 1, 2); "" or None -> (). With `allow_auto`,
    entries "auto" are kept as `records.AUTO`."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, Iterable):
        parts = list(value)
    else:
        parts = [value]
    out = []
    for part in parts:
        if allow_auto and isinstance(part, str) and part.strip().lower() == records.AUTO:
            out.append(records.AUTO)
            continue
        try:
            number = int(part)
            if isinstance(part, float) and part != number:
                raise ValueError
        except (TypeError, ValueError):
            also = ' or "auto"' if allow_auto else ""
            raise UsageError(f"--{flag} takes comma-separated integers{also}, e.g. --{flag} "
                             f"1,10; got {value!r}") from None
        out.append(number)
    return tuple(out)


def _int(values: Mapping[str, Any], name: str, default, minimum=None, hint: str = ""):
    value = values.get(name)
    if value is None:
        return default
    try:
        number = int(value)
        if isinstance(value, float) and value != number:
            raise ValueError
    except (TypeError, ValueError):
        raise UsageError(f"--{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise UsageError(f"--{name} must be >= {minimum}, got {number}{hint}")
    return number


def _float(values: Mapping[str, Any], name: str, default) -> float:
    value = values.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--{name} must be a number, got {value!r}") from None


def _str(values: Mapping[str, Any], name: str, default=None) -> Optional[str]:
    value = values.get(name)
    if value is None or value == "":
        return default
    return str(value)


def build_run_spec(values: Mapping[str, Any]) -> RunSpec:
    """Validates flag values into a RunSpec.

    Args:
      values: flag name -> value (None or missing = the default). `k` None means "not
        given" (DEFAULT_K, or the largest K of --k_sweep).

    Raises:
      UsageError: on any value that cannot work.
    """
    task = _str(values, "task")
    if task is None:
        raise UsageError(f"pass --task NAME, one of: {', '.join(sorted(tasks.TASKS))}")
    try:
        task_obj = tasks.get_task(task)
    except ValueError as e:
        raise UsageError(f"{e}; pass --task with one of them") from None

    completions = _str(values, "completions")
    k_sweep = parse_int_list(values.get("k_sweep"), "k_sweep", allow_auto=True)
    bad = [k for k in k_sweep if k != records.AUTO and k < 0]
    if bad:
        raise UsageError(f"--k_sweep values must be >= 0 (0 = autoregressive), got {bad[0]}")
    k_sweep = tuple(sorted(set(k_sweep), key=records.k_order))
    numbers = [k for k in k_sweep if k != records.AUTO]
    if values.get("k") is None:
        k = max(numbers) if numbers else (records.AUTO if k_sweep else DEFAULT_K)
    elif isinstance(values.get("k"), str) and values["k"].strip().lower() == records.AUTO:
        k = records.AUTO
    else:
        k = _int(values, "k", DEFAULT_K, minimum=0,
                 hint=' (the number of draft tokens per round; 0 = autoregressive only; '
                      '"auto" = adaptive)')

    num_samples = _int(values, "num_samples", 1, minimum=1)
    pass_at = parse_int_list(values.get("pass_at"), "pass_at") or None
    if pass_at is not None:
        if task_obj.name != "humaneval":
            raise UsageError(f"--pass_at applies to humaneval only, not --task {task}; "
                             f"drop --pass_at")
        if min(pass_at) < 1:
            raise UsageError(f"--pass_at values must be >= 1, got {min(pass_at)}")
        too_big = [p for p in pass_at if p > num_samples]
        if too_big and not completions:
            raise UsageError(f"pass@{too_big[0]} needs at least {too_big[0]} samples per "
                             f"problem but --num_samples is {num_samples}; raise "
                             f"--num_samples to {max(too_big)} or drop {too_big[0]} from "
                             f"--pass_at")
        pass_at = tuple(sorted(set(pass_at)))

    temperature = _float(values, "temperature", 0.0)
    if not temperature >= 0:
        raise UsageError(f"--temperature must be >= 0 (0 = greedy), got {temperature}")
    top_k = _int(values, "top_k", 0, minimum=0, hint=" (0 disables top-k)")
    top_p = _float(values, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise UsageError(f"--top_p must be in (0, 1] (1 disables nucleus sampling), "
                         f"got {top_p}")

    acceptance = _str(values, "acceptance", "exact")
    if acceptance not in ACCEPTANCE_RULES:
        raise UsageError(f"--acceptance must be one of {', '.join(ACCEPTANCE_RULES)}, got "
                         f"{acceptance!r}")
    typical_epsilon = _float(values, "typical_epsilon", None)
    typical_delta = _float(values, "typical_delta", None)
    if acceptance != "typical" and (typical_epsilon, typical_delta) != (None, None):
        raise UsageError("--typical_epsilon and --typical_delta apply to --acceptance typical "
                         "only; add --acceptance typical or drop them")
    if typical_epsilon is not None and not 0 < typical_epsilon <= 1:
        raise UsageError(f"--typical_epsilon must be in (0, 1], got {typical_epsilon}")
    if typical_delta is not None and not typical_delta > 0:
        raise UsageError(f"--typical_delta must be > 0, got {typical_delta}")

    limit = values.get("limit")
    limit = None if limit is None else _int(values, "limit", None, minimum=1)
    batch_size = _int(values, "batch_size", 1, minimum=1)
    max_new_tokens = _int(values, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, minimum=1)
    seed = _int(values, "seed", 0)
    if not 0 <= seed < 1 << 63:
        raise UsageError(f"--seed must be in [0, 2**63), got {seed}")

    output_dir = _str(values, "output_dir")
    resume = bool(values.get("resume") or False)
    if resume and output_dir is None:
        raise UsageError("--resume needs --output_dir: the folder of the run to continue")
    baseline = values.get("baseline")
    baseline = True if baseline is None else bool(baseline)

    target = _str(values, "target", DEFAULT_TARGET)
    draft = _str(values, "draft", DEFAULT_DRAFT)
    dtype = _str(values, "dtype")
    if dtype not in (None,) + DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    data_source = _str(values, "data_source")
    if data_source is not None and data_source not in task_obj.data_sources:
        raise UsageError(f"--data_source {data_source} is not available for {task}; choose "
                         f"from {', '.join(task_obj.data_sources)}")
    runner = _str(values, "runner", DEFAULT_RUNNER)
    if not is_local_runner(runner) and (output_dir is None or "://" not in output_dir):
        raise UsageError(f"--runner {runner} runs on remote workers, which cannot write to a "
                         f"local folder; pass --output_dir gs://BUCKET/PATH")
    return RunSpec(
        task=task, k=k, k_sweep=k_sweep, target=target, draft=draft,
        tokenizer=_str(values, "tokenizer"), dtype=dtype, temperature=temperature, top_k=top_k,
        top_p=top_p, acceptance=acceptance, typical_epsilon=typical_epsilon,
        typical_delta=typical_delta, num_samples=num_samples, pass_at=pass_at, limit=limit,
        batch_size=batch_size, max_new_tokens=max_new_tokens, seed=seed,
        output_dir=output_dir, resume=resume, baseline=baseline, completions=completions,
        data_source=data_source, data_path=_str(values, "data_path"), runner=runner,
        beam_args=tuple(values.get("beam_args") or ()), tpu=_str(values, "tpu"),
        config=_str(values, "config"),
        calibrate=True if values.get("calibrate") is None else bool(values["calibrate"]),
        prompt_eos=bool(values.get("prompt_eos") or False))
