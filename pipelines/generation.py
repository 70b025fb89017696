"""Generation stage of the evaluation pipeline: a Beam `ModelHandler` over `tfspec.generate`.

    handler = TfspecModelHandler(ModelSpec(target="zoo:tiny-code-target",
                                           draft="zoo:tiny-code-draft"))
    args = inference_args(modes=[("autoregressive", 0), ("speculative", 4)],
                          sampling={"temperature": 0.0, "top_k": 0, "top_p": 1.0},
                          seed=0, max_new_tokens=128)
    items | RunInference(handler, inference_args=args)   # -> PredictionResult(item, record)

`load_model` loads the target, the draft and the tokenizer once per worker process (Beam's
`RunInference` keeps the result in a process-wide `shared.Shared`; with `large_model=True` one
copy serves all processes of a machine through `multi_process_shared`, and the calls below
run in that copy's process). `run_inference(batch, model, inference_args)` turns a batch of
`evals.records.WorkItem`s into one record per (item, mode):

    {"kind": "generation", "id", "sample", "mode", "k", "prompt_sha256", "prompt", "raw_output",
     "num_tokens", "time_s", "batch_size", "rounds", "accepted", "drafted", "verified",
     "beta_sum", "accepted_per_position"}

Timing (what `time_s` means):
* It is the wall time of one `tfspec.generate` call (the compiled XLA loop plus the copy of
  its results to the host), measured with `time.perf_counter` around that call only:
  tokenization, decoding to text and scoring are outside it. Rows of one call share it.
* The first call of every compiled shape (draft length k, batch rows, prompt bucket) is run
  once untimed first, so XLA compilation is never counted; the warm-up call has the same
  inputs, so it also returns the same tokens. A k = "auto" shape warms both loops it may
  run (speculative and the autoregressive fallback), outside the run's auto controller.
* For each batch, all modes run back to back on the same rows, and the order of the modes
  rotates from one batch to the next (with batch size 1, the papers' setting, baseline
  first for one example and speculative first for the next), so slow periods of a shared
  machine hit the baseline and the speculative runs alike. With three or more modes (a K
  sweep) the order rotated is reshuffled every len(modes) batches (`mode_order`), so that
  no mode always runs right after the same other one: with a fixed cyclic order `auto`
  always followed K = 8 and the baseline always followed `auto`, and the baseline's
  requests after `auto`, token for token the same, took 4% longer in a docsum sweep.
* Calls are serialised per process (a lock), so threads of one worker never time each other.
* A generate call always has the handler's batch size of rows: a batch with fewer rows for a
  mode (the ragged last batch of a bundle, items that ask for fewer modes, calibration items
  in the batch) is padded with copies of its last row (same prompt, same row key, so the
  copies decode exactly what that row decodes and add no loop rounds), so no new batch shape
  is compiled in the middle of a timed run. Padded
  rows' outputs are dropped: they make no record and count in no statistic, and
  `batch_size` is the number of real rows. The real rows' `time_s` is then that of the
  padded call, as a server batching to a fixed size would see it.

Determinism: a row's tokens depend on (seed, prompt, row key) and on the shape of the call it
is decoded in (`tfspec.generate`: the kernels for one row and for many, and for different
prompt widths, round differently, and at temperature > 0 a token near a CDF boundary can
flip; measured on the embedded pair at T = 1, 64 tokens, 128 HumanEval prompts: 1-5 rows
differ between batch sizes 1, 2, 8 and 32). So the call shape is fixed per row: a call always
has `batch_size` rows (short batches padded, see "Timing") and holds only prompts of one
prompt bucket (`_generate` splits a batch by bucket), which makes the shape (batch_size,
bucket(prompt)) a function of the row alone. With fixed shapes a row does not depend on the
rows beside it (same measurement, rows shuffled among batches of 8: 0 of 128 differ). The row
key is `evals.records.row_key(id, sample)`, so every field except `time_s` is the same
whichever worker, batch, resume or retry produces it.

The draft cost ratio c (`_calibrate`, run for the one "calibrate" work item of a run): the
draft and the target each decode the first example's prompt autoregressively (k = 0, EOS
disabled so lengths are exact, the run's sampling) to two lengths n1 = 8 and
n2 = 8 + max(64, max_new_tokens). A model's per-token decode step time is the slope
(t(n2) - t(n1)) / (n2 - n1), which cancels the encoder pass and the fixed cost of a call;
t is the fastest of `reps` timed calls (interference on a shared machine only ever adds
time, so the minimum estimates the intrinsic cost best). Draft and target calls alternate,
after an untimed warm-up of each shape. c = draft step / target step; None (with a note)
when noise leaves no positive target slope (tiny models, whose steps take microseconds).
A feature draft (EAGLE-style, `tfspec.models.FeatureDraft`: no encoder, embedding or LM head
of its own) cannot decode alone; its steps are timed through `draft.alone()` (the target's
encoder, then the draft fed its own predicted features), whose encoder cost the slope
cancels as it does the target's.

The calibrated prediction (`evals.walltime.calibrated_speedup`) needs what a speculative round
really costs here: the same calibration decodes the prompt speculatively at
`calibration_ks(modes)` (the smallest, the largest and the run's k) to the same two lengths;
a round's time is (t(n2) - t(n1)) / (rounds(n2) - rounds(n1)), `round_s[k]`. The
per-request fixed costs (encoders, call overhead) are what the short call spends beyond its
steps: `ar_fixed_s` = t_target(n1) - n1 x target step, `spec_fixed_s` = the median over ks
of t(n1) - rounds(n1) x round_s[k]. These program costs are the fallback: where the run's
own batch-1 requests give fits (`evals.request_cost`, added at the end as the record's
`in_run`), the calibrated model uses those (`evals.summary.round_cost`). The program times
one prompt, EOS off, the fastest of `reps` calls, minutes away from the run; timed that way
a round cost 20-30% less than the same round in the run's interleaved requests, and the
predictions were up to 28% optimistic.
"""

import contextlib
import dataclasses
import random
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
from apache_beam.ml.inference import base

import tfspec
from tfspec import acceptance as acceptance_lib
from tfspec import adaptive
from tfspec import decoding
from tfspec import generation
from evals import records
from evals import walltime
from pipelines import status

GENERATION = "generation"
CALIBRATION = "calibration"
CALIBRATION_REPS = 5
CALIBRATION_SHORT = 8
CALIBRATION_MIN_GAP = 64
CALIBRATION_ATTEMPTS = 3
"""Calibrations measured before a non-positive target slope (timing noise) is reported."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Which models a worker loads.

    Attributes:
      target: `tfspec.load_model` spec of the target.
      draft: spec of the draft (a T5, or a feature draft trained for the target), or None
        (autoregressive only).
      tokenizer: `tfspec.load_tokenizer` spec; None = the target's own tokenizer.
      tpu: TPU name/address for `tfspec.distribute.resolve_strategy`, or None.
      dtype: `tfspec.load_model` dtype of both models ("float32" or "bfloat16"); None =
        float32. A feature draft stays float32 (it computes in float32 and reads the
        target's embedding and LM head, of the target's dtype).
      prompt_add_eos: append EOS to the encoder input. Public T5 checkpoints were trained
        with it; the embedded tiny-code pair was trained without it (as the default here).
    """

    target: str
    draft: Optional[str] = None
    tokenizer: Optional[str] = None
    tpu: Optional[str] = None
    prompt_add_eos: bool = False
    dtype: Optional[str] = None


@dataclasses.dataclass
class LoadedModels:
    """Target, draft and tokenizer as loaded by `load_models`."""

    target: Any
    draft: Any
    tokenizer: Any
    strategy: Any = None

    def num_parameters(self) -> int:
        return sum(int(np.prod(v.shape)) for m in (self.target, self.draft) if m is not None
                   for v in m.weights)


_LOADED: Dict[ModelSpec, LoadedModels] = {}
_LOAD_LOCK = threading.Lock()


def load_models(spec: ModelSpec) -> LoadedModels:
    """Loads (once per process) and checks the models and tokenizer of `spec`.

    A feature draft comes back bound to the target (`FeatureDraft.bind`). Both models come
    back frozen (`tfspec.freeze_weights`): the pipeline never changes their weights.

    Raises:
      FileNotFoundError, ValueError: a model or tokenizer cannot be loaded, the target has no
        tokenizer, the vocabularies do not fit together (the message names both sizes), or
        a feature draft cannot draft for the target (e.g. trained for another one).
    """
    with _LOAD_LOCK:
        if spec in _LOADED:
            return _LOADED[spec]
        strategy = None
        if spec.tpu:
            from tfspec import distribute  # pylint: disable=import-outside-toplevel
            strategy = distribute.resolve_strategy(spec.tpu)
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            target = _load_one(spec.target, "--target", spec.dtype)
            draft = _load_one(spec.draft, "--draft", spec.dtype) if spec.draft else None
        if draft is not None and draft.vocab_size != target.vocab_size:
            raise ValueError(f"target and draft must share the vocabulary: target "
                             f"{spec.target} has vocab_size {target.vocab_size}, draft "
                             f"{spec.draft} has vocab_size {draft.vocab_size}")
        if draft is not None and decoding.uses_target_features(draft):
            try:
                draft.bind(target)
            except ValueError as e:
                raise ValueError(f"--draft {spec.draft} cannot draft for --target "
                                 f"{spec.target}: {_one_line(e)}") from None
        tokenizer = _load_tokenizer(spec, target)
        tfspec.tokenizer.check_vocab(tokenizer, target.vocab_size)
        # Nothing here changes their weights: decoding need not check its kernel panels
        # against them on every request (4-5 ms of a ~20 ms request of the embedded pair).
        tfspec.freeze_weights(target, draft)
        loaded = LoadedModels(target=target, draft=draft, tokenizer=tokenizer,
                              strategy=strategy)
        _LOADED[spec] = loaded
        return loaded


def _load_one(model_spec: str, flag: str, dtype: Optional[str] = None):
    try:
        return tfspec.load_model(model_spec, dtype=dtype)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"cannot load {flag} {model_spec}: {_one_line(e)}") from None


def _load_tokenizer(spec: ModelSpec, target):
    try:
        if spec.tokenizer:
            return tfspec.load_tokenizer(spec.tokenizer)
        if getattr(target, "tokenizer_path", None):
            return tfspec.load_tokenizer(target)
        if spec.target.startswith("zoo:"):
            return tfspec.load_tokenizer(spec.target)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"cannot load the tokenizer: {_one_line(e)}") from None
    raise ValueError(f"the target {spec.target} has no tokenizer (no spiece.model next to "
                     f"its weights); pass --tokenizer PATH/TO/spiece.model")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def inference_args(modes: Sequence[Sequence[Any]], sampling: Mapping[str, Any], seed: int,
                   max_new_tokens: int, calibration_reps: int = CALIBRATION_REPS,
                   acceptance: Optional[Mapping[str, Any]] = None) -> dict:
    """The `inference_args` of `RunInference` (plain, picklable values).

    Args:
      modes: (mode name, k) pairs to produce for every item (items may ask for fewer).
      sampling: `tfspec.Sampling` fields.
      seed: the run seed.
      max_new_tokens: generation budget per row.
      calibration_reps: timed repetitions per (model, length) of the cost measurement.
      acceptance: the speculative modes' rule as `tfspec.acceptance.from_record` reads it
        ({"rule": "typical", "epsilon", "delta"}); None = exact.
    """
    return {"modes": [[str(m), records.draft_length(k)] for m, k in modes],
            "sampling": dict(sampling),
            "seed": int(seed), "max_new_tokens": int(max_new_tokens),
            "calibration_reps": int(calibration_reps),
            "acceptance": None if acceptance is None else dict(acceptance)}


_REQUIRED_ARGS = ("modes", "sampling", "seed", "max_new_tokens")


def mode_order(modes: Sequence, batch_index: int, seed: int) -> list:
    """The order in which the modes run on batch number `batch_index` of a worker.

    Batches come in blocks of len(modes): within a block the order rotates by one per batch,
    so every mode runs in every position once per block; each block rotates its own order,
    the modes after the first shuffled by (seed, block), so that over a sweep each mode
    follows many others. With two modes this is plain alternation. Example, modes
    [A, B, C]: block 0 might rotate [A, C, B] (batches: ACB, CBA, BAC), block 1 [A, B, C].
    """
    modes = list(modes)
    if len(modes) < 2:
        return modes
    block, shift = divmod(batch_index, len(modes))
    rest = modes[1:]
    random.Random(f"{seed}:{block}").shuffle(rest)
    base = modes[:1] + rest
    return base[shift:] + base[:shift]


class Generator:
    """The per-worker model: turns work items into records (see the module docstring)."""

    def __init__(self, spec: ModelSpec, models: Optional[LoadedModels] = None,
                 batch_size: Optional[int] = None):
        """`batch_size`: pad every generate call to at least this many rows (see "Timing");
        None: no padding (each call has exactly its real rows)."""
        self.spec = spec
        if models is None:
            if spec not in _LOADED:  # In-process runners reuse the driver's models.
                status.report_phase("loading models")
            models = load_models(spec)
        self.models = models
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._warm = set()
        self._calls = 0

    # ------------------------------------------------------------------------------ public

    def run(self, items: Sequence[records.WorkItem], args: Mapping[str, Any]) -> List[dict]:
        """Records for a batch of items: one per (generate item, mode), one per calibration."""
        modes = [(str(m), records.draft_length(k)) for m, k in args["modes"]]
        with self._lock:
            generate_items = [i for i in items if i.kind == records.GENERATE]
            order = mode_order(modes, self._calls, args["seed"])  # See "Timing".
            self._calls += 1
            out = []
            for mode, k in order:
                rows = [i for i in generate_items
                        if i.modes is None or (mode, k) in {(m, records.draft_length(kk))
                                                            for m, kk in i.modes}]
                if rows:
                    out.extend(self._generate(rows, mode, k, args))
            for item in items:
                if item.kind == records.CALIBRATE:
                    out.append(self._calibrate(item, args))
            return out

    # ----------------------------------------------------------------------------- helpers

    def _encode(self, text: str) -> List[int]:
        ids = self.models.tokenizer.encode(text, add_eos=self.spec.prompt_add_eos)
        # An empty prompt becomes [EOS], as in the training data of the embedded pair.
        return ids or [self.models.tokenizer.eos_id]

    def _call(self, target, prompts, keys, k, args, max_new_tokens=None, **overrides):
        """`tfspec.generate` with the run's settings; k: a draft length, or an AutoDraft."""
        speculates = isinstance(k, adaptive.AutoDraft) or records.speculates(k)
        kwargs = dict(draft=self.models.draft if speculates else None, k=k,
                      max_new_tokens=int(max_new_tokens or args["max_new_tokens"]),
                      sampling=tfspec.Sampling(**args["sampling"]), seed=int(args["seed"]),
                      row_keys=keys, strategy=self.models.strategy)
        if speculates:
            kwargs["acceptance"] = acceptance_lib.from_record(args.get("acceptance"))
        kwargs.update(overrides)
        return tfspec.generate(target, prompts, **kwargs)

    def _timed(self, warm_key, fn, phase: Optional[str] = None, warm_fn=None):
        """Runs fn untimed once per new compiled shape, then timed; returns (result, s).

        `phase`: what the progress display shows during the timed call (the untimed first
        call shows "compiling ..." instead). `warm_fn`: what the untimed call runs instead
        of fn (it must compile every program fn may run)."""
        if warm_key not in self._warm:
            status.report_phase(_compile_phase(warm_key))
            (warm_fn or fn)()
            self._warm.add(warm_key)
        if phase:
            status.report_phase(phase)
        start = time.perf_counter()
        result = fn()
        return result, time.perf_counter() - start

    def _generate(self, rows, mode, k, args) -> List[dict]:
        """Records of `rows` in one mode: one padded call per prompt bucket (see
        "Determinism": a row's call shape must not depend on the rows beside it)."""
        by_bucket: Dict[int, list] = {}
        for item in rows:
            width = generation.prompt_bucket(len(self._encode(item.example.prompt)))
            by_bucket.setdefault(width, []).append(item)
        out = []
        for width in sorted(by_bucket):
            out.extend(self._generate_bucket(by_bucket[width], mode, k, args))
        return out

    def _generate_bucket(self, rows, mode, k, args) -> List[dict]:
        prompts = [self._encode(item.example.prompt) for item in rows]
        keys = [item.row_key for item in rows]
        # Pad a short batch to the compiled batch size (see "Timing") with copies of the last
        # row: same prompt (the prompt bucket stays the same) and same row key, so a copy
        # decodes token for token what that row decodes and the loop runs no extra rounds
        # for it. A real row's tokens depend only on (seed, prompt, row key), so padding
        # leaves them unchanged; its time_s is the padded call's, as a server padding to its
        # fixed batch would measure it. Only the first len(rows) rows of the result are read
        # below: padded rows make no record.
        padding = max(0, (self.batch_size or 0) - len(rows))
        prompts += [prompts[-1]] * padding
        keys += [keys[-1]] * padding
        width = generation.prompt_bucket(max(len(p) for p in prompts))
        target = self.models.target
        warm_fn = None
        if k == records.AUTO:
            # A k = "auto" call runs whichever loop its controller picks (the autoregressive
            # fallback, or speculation compiled for the window its controller chose), so
            # one untimed call would compile only one of them and the others would compile
            # inside timed calls (measured: 10-15 s records in a HumanEval T = 1 sweep).
            # Warm them all, each through a fresh controller that is then dropped
            # (`adaptive.untracked`), so the warm-up is not a request the run's controller
            # sees: a fresh controller's window is its k_max (`adaptive.PRIOR_OVERLAP`), so
            # k_max = w compiles w. (Kept controllers learnt their first bucket's overlap
            # and compiled window 1 for every later bucket: a 5.7 s record at the first
            # 256-token prompt of a HumanEval T = 1 run, window 2 compiling in it.)
            auto = adaptive.resolve(records.AUTO)
            windows = (range(1, auto.k_max + 1) if auto.draft_cost is not None
                       else [auto.k_max])

            def warm_fn():
                self._call(target, prompts, keys, 0, args)
                with adaptive.untracked():
                    for window in windows:
                        self._call(target, prompts, keys,
                                   dataclasses.replace(auto, k_max=window, fallback=False),
                                   args)
        gen, seconds = self._timed(
            ("generate", k, len(prompts), width, _static_args(args)),
            lambda: self._call(target, prompts, keys, k, args), phase="decoding",
            warm_fn=warm_fn)
        stats = gen.stats
        out = []
        for i, item in enumerate(rows):  # Real rows only: padded rows are dropped.
            length = int(gen.lengths[i])
            out.append({
                "kind": GENERATION, "id": item.id, "sample": item.sample, "mode": mode, "k": k,
                "prompt_sha256": records.prompt_sha256(item.example.prompt),
                "prompt": item.example.prompt,
                "raw_output": self.models.tokenizer.decode(gen.tokens[i, :length]),
                "num_tokens": length, "time_s": seconds, "batch_size": len(rows),
                "rounds": int(stats.rounds[i]), "accepted": int(stats.accepted[i]),
                "drafted": int(stats.drafted[i]), "verified": int(stats.verified[i]),
                "beta_sum": float(stats.beta_sum[i]),
                "accepted_per_position": [int(x) for x in stats.accepted_per_position[i]],
            })
        return out

    def _calibrate(self, item, args) -> dict:
        record = {"kind": CALIBRATION, "id": item.id, "sample": item.sample,
                  "draft_cost_ratio": None, "draft_step_s": None, "target_step_s": None}
        if self.models.draft is None:
            record["note"] = "no draft model"
            return record
        prompts = [self._encode(item.example.prompt)]
        keys = [item.row_key]
        width = generation.prompt_bucket(len(prompts[0]))
        lengths = (CALIBRATION_SHORT,
                   CALIBRATION_SHORT + max(CALIBRATION_MIN_GAP, int(args["max_new_tokens"])))
        reps = max(1, int(args.get("calibration_reps", CALIBRATION_REPS)))
        status.report_phase("measuring the draft cost ratio c (calibration)")
        models = {"draft": draft_alone(self.models.draft, self.models.target),
                  "target": self.models.target}
        # On a small model the slope between two lengths can drown in timing noise (a
        # busy machine): measure again, with twice the repeats, before giving up.
        for attempt in range(CALIBRATION_ATTEMPTS):
            reps = reps * 2 if attempt else reps
            steps, times = self._step_slopes(models, prompts, keys, width, lengths, reps, args)
            if steps["target"] > 0:
                break
        record.update(draft_step_s=steps["draft"], target_step_s=steps["target"],
                      lengths=list(lengths), reps=reps,
                      method="slope of the fastest AR decode time between two lengths")
        try:
            record["draft_cost_ratio"] = walltime.draft_cost_ratio(
                max(steps["draft"], 0.0), steps["target"])
        except ValueError as e:  # Timing noise left no positive target slope.
            record["note"] = _one_line(e)
            return record
        record["ar_fixed_s"] = max(
            min(times[("target", lengths[0])]) - lengths[0] * steps["target"], 0.0)
        record.update(self._round_costs(prompts, keys, width, lengths, reps, args))
        return record

    def _step_slopes(self, models, prompts, keys, width, lengths, reps, args):
        """({name: seconds per decode step}, {(name, length): [seconds]}): the slope of the
        fastest of `reps` autoregressive decodes of each model between the two `lengths`,
        the models' order alternating between repeats."""
        times = {(name, n): [] for name in models for n in lengths}
        for rep in range(reps):
            order = ["draft", "target"] if rep % 2 == 0 else ["target", "draft"]
            for name in order:
                for n in lengths:
                    _, seconds = self._timed(
                        ("calibrate", name, width, n, _static_args(args)),
                        lambda m=models[name], n=n: self._call(
                            m, prompts, keys, 0, args, max_new_tokens=n, eos_id=None),
                        phase="measuring the draft cost ratio c (calibration)")
                    times[(name, n)].append(seconds)
        steps = {name: (min(times[(name, lengths[1])]) - min(times[(name, lengths[0])]))
                 / (lengths[1] - lengths[0]) for name in models}
        return steps, times

    def _round_costs(self, prompts, keys, width, lengths, reps, args) -> dict:
        """Measured seconds per speculative round at the calibration ks (see "calibrated
        prediction" in the module docstring) and the speculative per-request fixed cost."""
        round_s, fixed_s = {}, []
        for k in calibration_ks(args["modes"]):
            best, rounds = {}, {}
            for n in lengths:
                for _ in range(reps):
                    gen, seconds = self._timed(
                        ("calibrate", "speculative", k, width, n, _static_args(args)),
                        lambda k=k, n=n: self._call(self.models.target, prompts, keys, k,
                                                    args, max_new_tokens=n, eos_id=None))
                    best[n] = min(best.get(n, float("inf")), seconds)
                    rounds[n] = int(gen.stats.rounds[0])
            extra_rounds = rounds[lengths[1]] - rounds[lengths[0]]
            if extra_rounds <= 0:
                continue
            round_s[str(k)] = (best[lengths[1]] - best[lengths[0]]) / extra_rounds
            fixed_s.append(best[lengths[0]] - rounds[lengths[0]] * round_s[str(k)])
        if not round_s:
            return {}
        return {"round_s": round_s, "spec_fixed_s": max(float(np.median(fixed_s)), 0.0)}


def draft_alone(draft, target):
    """What the calibration times as the draft decoding alone: `draft`, or for a feature
    draft (which cannot decode alone) its `alone()` model bound to `target`."""
    if decoding.uses_target_features(draft):
        return draft.bind(target).alone()
    return draft


class TfspecModelHandler(base.ModelHandler):
    """`RunInference` handler: WorkItems in, `PredictionResult(item, record)` out.

    Args:
      spec: the models to load.
      batch_size: rows per generate call (RunInference batches exactly this many items,
        fewer at the end of a bundle; such a short batch is padded to this size, so it reuses
        the compiled program, and the padded rows' outputs are dropped).
      large_model: share one loaded copy among the processes of a machine.
    """

    def __init__(self, spec: ModelSpec, batch_size: int = 1, large_model: bool = False):
        super().__init__(min_batch_size=batch_size, max_batch_size=batch_size,
                         large_model=large_model)
        self._spec = spec
        self._batch_size = batch_size

    def load_model(self) -> Generator:
        return Generator(self._spec, batch_size=self._batch_size)

    def run_inference(self, batch: Sequence[records.WorkItem], model: Generator,
                      inference_args: Optional[Dict[str, Any]] = None
                      ) -> Iterable[base.PredictionResult]:
        self.validate_inference_args(inference_args)
        items = list(batch)
        by_key = {(i.kind, i.id, i.sample): i for i in items}
        out = []
        for record in model.run(items, inference_args):
            kind = records.CALIBRATE if record["kind"] == CALIBRATION else records.GENERATE
            item = by_key[(kind, record["id"], record["sample"])]
            out.append(base.PredictionResult(example=item, inference=record))
        return out

    def validate_inference_args(self, inference_args: Optional[Dict[str, Any]]):
        missing = [k for k in _REQUIRED_ARGS if k not in (inference_args or {})]
        if missing:
            raise ValueError(f"inference_args needs {', '.join(missing)}; build it with "
                             f"pipelines.generation.inference_args(...)")

    def get_num_bytes(self, batch: Sequence[records.WorkItem]) -> int:
        return sum(len(i.example.prompt.encode("utf-8")) for i in batch)

    def get_metrics_namespace(self) -> str:
        return "tfspec"

    def __repr__(self) -> str:
        return f"TfspecModelHandler({self._spec})"


def calibration_ks(modes: Sequence[Sequence[Any]]) -> List[int]:
    """The ks whose round cost the calibration measures: the smallest, the largest and the
    speculative run's k among the run's modes (at most three, each one more compile per
    prompt bucket; `evals.walltime.fit_round_cost` fits a line through them). Round time is
    not quite linear in k on CPU: `tfspec.kernels` multiplies up to six rows per pass, so a
    verify of k + 1 > 6 rows costs a step more (the example report's K sweeps drop at
    K = 6), and the calibrated prediction is optimistic by up to ~28% at some K there."""
    ks = sorted({int(k) for _, k in modes if k != records.AUTO and int(k) > 0})
    if not ks:
        # An "auto"-only run: the round costs of its compiled maximum and of k = 1.
        if any(k == records.AUTO for _, k in modes):
            from tfspec import adaptive  # pylint: disable=import-outside-toplevel
            return sorted({1, adaptive.AutoDraft().k_max})
        return []
    chosen = {ks[0], ks[-1]}
    chosen.update(int(k) for m, k in modes
                  if m == records.SPECULATIVE and k != records.AUTO and int(k) > 0)
    return sorted(chosen)


def _compile_phase(warm_key: tuple) -> str:
    """The progress phase of the untimed first call of a compiled shape."""
    if warm_key[0] == "generate":
        _, k, rows, width, _ = warm_key
        return (f"compiling k={k}, batch {rows}, prompt bucket {width} "
                f"(untimed warm-up call)")
    if warm_key[1] == "speculative":  # ("calibrate", "speculative", k, width, n, args)
        _, _, k, width, n, _ = warm_key
        return (f"calibration: compiling speculative rounds at k={k}, {n} tokens, prompt "
                f"bucket {width} (untimed warm-up call)")
    _, name, width, n, _ = warm_key
    return (f"calibration: compiling the {name} alone, {n} tokens, prompt bucket {width} "
            f"(untimed warm-up call)")


def _static_args(args: Mapping[str, Any]) -> tuple:
    """The inference args that select a compiled program (with k, batch and prompt width)."""
    acceptance = args.get("acceptance")
    return (int(args["max_new_tokens"]), tuple(sorted(args["sampling"].items())),
            None if acceptance is None else tuple(sorted(acceptance.items())))
