"""Tests for pipelines.generation: the handler called directly, then through RunInference."""

import dataclasses
import time

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference import base as inference_base
from apache_beam.testing import test_pipeline
from apache_beam.testing import util as beam_util

import tfspec
from evals import records
from pipelines import generation
from tfspec import generation as tf_generation
from tests.pipelines import tiny_models

MODES = [("autoregressive", 0), ("speculative", 3)]
GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
SAMPLED = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
MAX_NEW = 8


@pytest.fixture(scope="module")
def spec(pair):
    return generation.ModelSpec(target=pair["target"], draft=pair["draft"])


@pytest.fixture(scope="module")
def make_items(humaneval_examples):
    """WorkItems of the first HumanEval problems (the prompts the pipeline tests use too)."""

    def make(n=2, samples=1):
        return [records.WorkItem(example=e, sample=s)
                for e in humaneval_examples[:n] for s in range(samples)]

    return make


def _args(sampling=GREEDY, modes=MODES, seed=0):
    return generation.inference_args(modes, sampling, seed, MAX_NEW)


def test_handler_direct_one_record_per_item_and_mode(spec, make_items):
    handler = generation.TfspecModelHandler(spec)
    model = handler.load_model()
    items = make_items(2)
    results = list(handler.run_inference(items[:1], model, _args()))
    results += list(handler.run_inference(items[1:], model, _args()))
    assert all(isinstance(r, inference_base.PredictionResult) for r in results)
    keys = sorted((r.inference["id"], r.inference["sample"], r.inference["mode"])
                  for r in results)
    assert keys == [(i.id, 0, m) for i in items for m in ("autoregressive", "speculative")]
    for r in results:
        rec = r.inference
        assert r.example.id == rec["id"]
        assert rec["prompt_sha256"] == records.prompt_sha256(r.example.example.prompt)
        assert rec["prompt"] == r.example.example.prompt  # The text beside its hash.
        assert 1 <= rec["num_tokens"] <= MAX_NEW
        assert rec["time_s"] > 0 and rec["batch_size"] == 1
        if rec["k"] == 0:
            assert rec["drafted"] == rec["accepted"] == 0
            assert rec["accepted_per_position"] == []
            assert rec["rounds"] == rec["num_tokens"]
        else:
            assert rec["drafted"] == 3 * rec["rounds"]
            assert len(rec["accepted_per_position"]) == 3
    # Greedy speculative decoding is exact: the same text as the baseline.
    by_key = {(r.inference["id"], r.inference["mode"]): r.inference["raw_output"]
              for r in results}
    for item in items:
        assert by_key[(item.id, "speculative")] == by_key[(item.id, "autoregressive")]


def test_modes_alternate_from_batch_to_batch(spec, make_items):
    generator = generation.Generator(spec)
    orders = []
    for item in make_items(2) * 2:
        orders.append([r["mode"] for r in generator.run([item], _args())])
    assert orders == [["autoregressive", "speculative"], ["speculative", "autoregressive"]] * 2


@pytest.mark.parametrize("num_modes", [3, 5, 10])
def test_mode_order_puts_every_mode_everywhere_and_after_many_others(num_modes):
    """Per block of len(modes) batches every mode runs once in every position; across
    blocks a mode's predecessor changes (a fixed cyclic rotation gives each mode one
    predecessor only, which fails this)."""
    modes = [f"m{i}" for i in range(num_modes)]
    orders = [generation.mode_order(modes, b, seed=0) for b in range(8 * num_modes)]
    for order in orders:
        assert sorted(order) == sorted(modes)
    for start in range(0, len(orders), num_modes):
        block = orders[start:start + num_modes]
        for position in range(num_modes):
            assert sorted(o[position] for o in block) == sorted(modes)
    predecessors = {(o[i - 1], o[i]) for o in orders for i in range(1, num_modes)}
    before_m1 = {before for before, after in predecessors if after == "m1"}
    assert len(before_m1) >= min(3, num_modes - 1)
    assert orders == [generation.mode_order(modes, b, seed=0) for b in range(len(orders))]


def test_compilation_is_not_timed(spec, make_items):
    # A sampling setting no other test uses forces a new compiled program.
    generator = generation.Generator(spec)
    args = generation.inference_args([("autoregressive", 0)],
                                     {"temperature": 0.7, "top_k": 5, "top_p": 0.9}, 0, MAX_NEW)
    start = time.perf_counter()
    (record,) = generator.run(make_items(1), args)
    wall = time.perf_counter() - start
    assert wall > 0.3  # An XLA compilation happened in this call...
    assert record["time_s"] < wall / 4  # ...and is not in the timing.


def test_rows_reproduce_whatever_the_batch(spec, make_items):
    """Per-row streams are keyed by (id, sample) and call shapes are fixed per row (batch
    size, the row's own prompt bucket): batching and order change nothing."""
    items = make_items(2, samples=2)
    generator = generation.Generator(spec, batch_size=4)
    args = _args(SAMPLED, modes=[("speculative", 3)])
    alone = {}
    for item in items:
        for r in generator.run([item], args):
            alone[(r["id"], r["sample"], r["mode"])] = r
    batched = generator.run(list(reversed(items)), args)
    assert len(batched) == len(alone)
    for r in batched:
        ref = alone[(r["id"], r["sample"], r["mode"])]
        assert r["batch_size"] == 2  # Each call holds the two samples of one prompt.
        for field in ("raw_output", "num_tokens", "rounds", "accepted", "drafted",
                      "verified", "accepted_per_position"):
            assert r[field] == ref[field], field
        assert r["beta_sum"] == pytest.approx(ref["beta_sum"], rel=1e-5)
    # Different samples of one example draw different streams.
    assert len({r["raw_output"] for r in batched}) > 1


def test_items_ask_for_their_missing_modes_only(spec, make_items):
    generator = generation.Generator(spec)
    item = records.WorkItem(example=make_items(1)[0].example, sample=0,
                            modes=(("speculative", 3),))
    assert [r["mode"] for r in generator.run([item], _args())] == ["speculative"]


def test_calibration_record(spec, make_items):
    generator = generation.Generator(spec)
    item = records.WorkItem(example=make_items(1)[0].example, sample=0,
                            kind=records.CALIBRATE)
    (record,) = generator.run([item], _args())
    assert record["kind"] == generation.CALIBRATION
    # Repeats double on a retry (timing noise left no positive target slope).
    assert record["lengths"] == [8, 8 + 64] and record["reps"] in [
        generation.CALIBRATION_REPS * 2 ** i for i in range(generation.CALIBRATION_ATTEMPTS)]
    assert np.isfinite(record["draft_step_s"]) and np.isfinite(record["target_step_s"])
    c = record["draft_cost_ratio"]
    assert (c is not None and c >= 0) or "note" in record
    if c is not None:  # Round costs at the speculative ks of the run's modes.
        ks = generation.calibration_ks(_args()["modes"])
        assert sorted(record["round_s"], key=int) == [str(k) for k in ks]
        assert all(v > 0 for v in record["round_s"].values())
        assert record["ar_fixed_s"] >= 0 and record["spec_fixed_s"] >= 0


@pytest.mark.parametrize("target_slopes, reps, has_ratio", [
    ([1e-3], 5, True),                    # the first measurement holds
    ([-1e-4, 2e-3], 10, True),            # noise, then twice the repeats
    ([0.0, -1e-4, -2e-4], 20, False),     # noise every time: a note, no ratio
])
def test_calibration_measures_again_when_noise_hides_the_slope(
        spec, make_items, monkeypatch, target_slopes, reps, has_ratio):
    generator = generation.Generator(spec)
    slopes, seen_reps = iter(target_slopes), []

    def fake_slopes(models, prompts, keys, width, lengths, reps, args):
        seen_reps.append(reps)
        times = {(name, n): [0.01 * n] for name in models for n in lengths}
        return {"draft": 2e-4, "target": next(slopes)}, times

    monkeypatch.setattr(generator, "_step_slopes", fake_slopes)
    monkeypatch.setattr(generator, "_round_costs", lambda *a: {})
    item = records.WorkItem(example=make_items(1)[0].example, sample=0,
                            kind=records.CALIBRATE)
    (record,) = generator.run([item], _args())
    assert seen_reps == [5, 10, 20][:len(target_slopes)] and record["reps"] == reps
    assert (record["draft_cost_ratio"] is not None) == has_ratio
    assert has_ratio or "note" in record


@pytest.mark.parametrize("modes, expected", [
    ([("autoregressive", 0), ("speculative", 4)], [4]),
    ([("autoregressive", 0)], []),
    ([("autoregressive", 0), ("speculative_k1", 1), ("speculative_k2", 2),
      ("speculative", 4), ("speculative_k8", 8)], [1, 4, 8]),
    ([("speculative_k3", 3), ("speculative_k6", 6), ("speculative", 5)], [3, 5, 6]),
])
def test_calibration_ks(modes, expected):
    assert generation.calibration_ks(modes) == expected


def test_through_run_inference_in_a_test_pipeline(spec, make_items):
    items = make_items(2)
    expected = sorted((i.id, 0, m) for i in items for m, _ in MODES)
    generator = generation.Generator(spec)
    direct = {(r["id"], r["mode"]): r["raw_output"]
              for item in items for r in generator.run([item], _args())}
    with test_pipeline.TestPipeline() as p:
        out = (p | beam.Create(items)
               | inference_base.RunInference(generation.TfspecModelHandler(spec),
                                             inference_args=_args())
               | beam.Map(lambda r: (r.inference["id"], r.inference["sample"],
                                     r.inference["mode"], r.inference["raw_output"])))
        beam_util.assert_that(
            out, beam_util.equal_to([(i, s, m, direct[(i, m)]) for i, s, m in expected]))


def _traces(target) -> int:
    """Traces so far of the compiled generate loops of `target` (all k, shapes, settings)."""
    return sum(fn.experimental_get_tracing_count()
               for fn in tf_generation.compiled_loops(target))


def test_ragged_last_batch_is_padded_without_a_new_compile(spec, make_items, monkeypatch):
    """3 items at batch size 2: the last batch of 1 is padded to 2 rows, so it reuses the
    compiled program; it yields its one real item's records, with the tokens of an unpadded
    run."""
    items = make_items(1, samples=3)  # One prompt, 3 row keys: every call has one bucket.
    batches = [items[:2], items[2:]]
    # A sampling setting no other test uses: its compiled loops are traced here first.
    args = _args({"temperature": 0.9, "top_k": 0, "top_p": 1.0}, modes=[("speculative", 3)])
    handler = generation.TfspecModelHandler(spec, batch_size=2)
    model = handler.load_model()
    rows_per_call = []
    real_generate = tfspec.generate

    def counting(target, prompts, **kwargs):
        rows_per_call.append(len(prompts))
        return real_generate(target, prompts, **kwargs)

    monkeypatch.setattr(tfspec, "generate", counting)
    results = list(handler.run_inference(batches[0], model, args))
    traces = _traces(model.models.target)
    assert traces > 0
    ragged = list(handler.run_inference(batches[1], model, args))
    assert _traces(model.models.target) == traces  # No trace (compile) for the last batch:
    assert rows_per_call == [2, 2, 2]  # warm-up and timed call of 2 rows, then the padded one.

    assert [r.example for r in ragged] == [items[2]]  # The padded row made no record.
    monkeypatch.setattr(tfspec, "generate", real_generate)
    unpadded = generation.Generator(spec)  # batch_size None: calls of the real rows only.
    reference = [r for b in batches for r in unpadded.run(b, args)]
    got = [r.inference for r in results + ragged]
    assert len(got) == len(reference) == 3
    for record, want in zip(got, reference):  # Everything but the timing is the same...
        assert {**record, "time_s": None, "beta_sum": None} == \
            {**want, "time_s": None, "beta_sum": None}
        # ...except float round-off of beta_sum, which XLA sums differently per batch shape
        # (as in test_rows_reproduce_whatever_the_batch).
        assert record["beta_sum"] == pytest.approx(want["beta_sum"], rel=1e-5)
    assert [r["batch_size"] for r in got] == [2, 2, 1]  # Real rows per call, as unpadded.


def test_handler_batches_exactly_batch_size(spec):
    handler = generation.TfspecModelHandler(spec, batch_size=4)
    assert handler.batch_elements_kwargs() == {"min_batch_size": 4, "max_batch_size": 4}
    assert not handler.share_model_across_processes()
    assert generation.TfspecModelHandler(spec, large_model=True).share_model_across_processes()
    with pytest.raises(ValueError, match="inference_args needs modes"):
        handler.validate_inference_args({"seed": 0})


def test_load_models_errors(pair, tmp_path):
    with pytest.raises(ValueError, match="cannot load --target"):
        generation.load_models(generation.ModelSpec(target=str(tmp_path / "missing")))
    other = tiny_models.make_pair(str(tmp_path / "other"),
                                  draft_vocab_size=pair["vocab_size"] + 8)
    with pytest.raises(ValueError, match=r"share the vocabulary.*vocab_size 320.*vocab_size 328"):
        generation.load_models(generation.ModelSpec(target=other["target"],
                                                    draft=other["draft"]))


@pytest.mark.parametrize("dtype", [None, "float32", "bfloat16"])
def test_dtype_is_passed_to_load_model(pair, dtype):
    models = generation.load_models(generation.ModelSpec(target=pair["target"],
                                                         draft=pair["draft"], dtype=dtype))
    for model in (models.target, models.draft):
        assert {v.dtype for v in model.weights} == {dtype or "float32"}


def test_loaded_models_are_frozen(pair):
    """The pipeline never changes their weights: decoding skips the per-request check of
    their kernel panels (`tfspec.freeze_weights`)."""
    models = generation.load_models(generation.ModelSpec(target=pair["target"],
                                                         draft=pair["draft"]))
    assert tfspec.frozen.is_frozen(models.target) and tfspec.frozen.is_frozen(models.draft)


def _loop_is_xla(spec) -> bool:
    """Decodes one prompt autoregressively with a loop new to the target (max_new_tokens 2,
    which no other test asks for); whether that loop is an XLA program."""
    models = generation.load_models(spec)
    before = set(tf_generation.compiled_loops(models.target))
    tfspec.generate(models.target, [[5, 6, 7]], k=0, max_new_tokens=2, seed=7)
    (loop,) = set(tf_generation.compiled_loops(models.target)) - before
    return bool(loop._jit_compile)  # pylint: disable=protected-access


def test_harness_tests_decode_with_graph_loops(spec):
    """`tests/conftest.py` (`_graph_loops`): the harness tests run tf.function graphs."""
    assert not _loop_is_xla(spec)


@pytest.mark.xla_loops
def test_tests_marked_xla_loops_decode_with_xla_programs(spec):
    assert _loop_is_xla(spec)


def test_phases_reported_while_generating(spec, make_items, tmp_path, monkeypatch):
    from pipelines import status  # pylint: disable=import-outside-toplevel
    phases = []
    monkeypatch.setattr(status, "report_phase", phases.append)
    # A process that has not loaded the models yet says so; one that has does not.
    fresh = dataclasses.replace(spec, dtype="float32")
    monkeypatch.delitem(generation._LOADED, fresh, raising=False)  # pylint: disable=protected-access
    generation.Generator(fresh, batch_size=1)
    assert phases == ["loading models"]
    phases.clear()
    generation.Generator(fresh, batch_size=1)
    assert phases == []
    model = generation.Generator(spec, batch_size=1)
    phases.clear()
    items = make_items(1)
    # A prompt bucket no other test of this module compiled, so the first call compiles.
    model.run(items, generation.inference_args([("speculative", 2)], GREEDY, 0, MAX_NEW + 1))
    model.run(items, generation.inference_args([("speculative", 2)], GREEDY, 0, MAX_NEW + 1))
    width = tf_generation.prompt_bucket(len(model._encode(items[0].example.prompt)))  # pylint: disable=protected-access
    assert phases == [f"compiling k=2, batch 1, prompt bucket {width} (untimed warm-up call)",
                      "decoding", "decoding"]


def test_embedded_pair_through_run_inference_greedy_modes_agree(make_items):
    """The handler on the shipped pair (the default of evals.run) in a TestPipeline: greedy
    speculative output equals the autoregressive baseline, and drafts are accepted."""
    spec = generation.ModelSpec(target="zoo:tiny-code-target", draft="zoo:tiny-code-draft")
    items = make_items(2)
    with test_pipeline.TestPipeline() as p:
        out = (p | beam.Create(items)
               | inference_base.RunInference(generation.TfspecModelHandler(spec),
                                             inference_args=_args())
               | beam.Map(lambda r: r.inference)
               | beam.combiners.ToList()
               | beam.Map(_check_embedded_records, [i.id for i in items]))
        beam_util.assert_that(out, beam_util.equal_to([True]))


def _check_embedded_records(rows, ids):
    by_key = {(r["id"], r["mode"]): r for r in rows}
    assert sorted(by_key) == sorted((i, m) for i in ids for m, _ in MODES)
    for i in ids:
        ar, spec = by_key[(i, "autoregressive")], by_key[(i, "speculative")]
        assert spec["raw_output"] == ar["raw_output"] and ar["num_tokens"] > 0
    drafted = sum(by_key[(i, "speculative")]["drafted"] for i in ids)
    accepted = sum(by_key[(i, "speculative")]["accepted"] for i in ids)
    assert drafted > 0 and accepted / drafted > 0.3
    return True


def test_call_shape_is_a_function_of_the_row(spec, make_items, monkeypatch):
    """A row is decoded in a call of `batch_size` rows of its own prompt bucket, whatever
    rows share its batch (one- and many-row kernels, and prompt widths, round differently,
    so a shape that depended on the companions could flip a sampled token)."""
    generator = generation.Generator(spec, batch_size=3)
    short = make_items(1)[0]
    long_prompt = short.example.prompt + "\n" + "    x = compute(x)  # step\n" * 40
    long = records.WorkItem(example=records.Example(id="long", source=long_prompt,
                                                    prompt=long_prompt, reference=""), sample=0)
    widths = {item.id: tf_generation.prompt_bucket(len(generator._encode(item.example.prompt)))
              for item in (short, long)}
    assert widths["long"] > widths[short.id]
    calls = []
    real_generate = tfspec.generate

    def recording(target, prompts, **kwargs):
        calls.append((len(prompts), tf_generation.prompt_bucket(max(len(p) for p in prompts))))
        return real_generate(target, prompts, **kwargs)

    monkeypatch.setattr(tfspec, "generate", recording)
    args = _args(SAMPLED, modes=[("autoregressive", 0)])
    together = {r["id"]: r["raw_output"] for r in generator.run([short, long], args)}
    # (Each shape is called twice: an untimed warm-up, then the timed call.)
    assert set(calls) == {(3, widths[short.id]), (3, widths["long"])}
    alone = {r["id"]: r["raw_output"] for item in (short, long)
             for r in generator.run([item], args)}
    assert together == alone


# ------------------------------------------------------------------------ feature drafts


@pytest.fixture(scope="module")
def feature_spec(pair, tmp_path_factory):
    """The session pair's target with a tiny random feature draft for it."""
    directory = str(tmp_path_factory.mktemp("feature_draft"))
    return generation.ModelSpec(target=pair["target"],
                                draft=tiny_models.make_feature_draft(directory, pair["target"]))


def test_a_feature_draft_is_loaded_bound_and_decodes_exactly(feature_spec, make_items):
    models = generation.load_models(feature_spec)
    assert isinstance(models.draft, tfspec.models.FeatureDraft)
    assert models.draft.target is models.target
    # Parameters counted once: the draft reads the target's embedding and LM head.
    target_only = sum(int(np.prod(v.shape)) for v in models.target.weights)
    assert target_only < models.num_parameters() < 2 * target_only
    generator = generation.Generator(feature_spec)
    out = {r["mode"]: r for r in generator.run(make_items(1), _args())}
    assert out["speculative"]["raw_output"] == out["autoregressive"]["raw_output"]
    assert out["speculative"]["drafted"] == 3 * out["speculative"]["rounds"]


def test_feature_draft_calibration_times_the_draft_alone(feature_spec, make_items,
                                                         monkeypatch):
    models_called = []
    real = tfspec.generate

    def spy(model, prompts, **kwargs):
        models_called.append((type(model).__name__, kwargs.get("k")))
        return real(model, prompts, **kwargs)

    monkeypatch.setattr(tfspec, "generate", spy)
    generator = generation.Generator(feature_spec)
    item = records.WorkItem(example=make_items(1)[0].example, sample=0,
                            kind=records.CALIBRATE)
    (record,) = generator.run([item], _args())
    assert ("FeatureDraftAlone", 0) in models_called  # c: the draft alone, k = 0.
    assert np.isfinite(record["draft_step_s"]) and np.isfinite(record["target_step_s"])
    c = record["draft_cost_ratio"]
    assert (c is not None and c >= 0) or "note" in record


def test_load_models_refuses_a_feature_draft_trained_for_another_target(pair, tmp_path):
    foreign = tiny_models.make_feature_draft(str(tmp_path / "foreign"), pair["target"],
                                             **tiny_models.FOREIGN)
    with pytest.raises(ValueError) as error:
        generation.load_models(generation.ModelSpec(target=pair["target"], draft=foreign))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"--draft {foreign} cannot draft for --target {pair['target']}: ")
    assert "zoo:some-other-target" in message


def test_a_feature_draft_stays_float32_under_bfloat16(pair, feature_spec):
    models = generation.load_models(dataclasses.replace(feature_spec, dtype="bfloat16"))
    assert {v.dtype for v in models.target.weights} == {"bfloat16"}
    assert {v.dtype for v in models.draft.weights} - {"int32"} == {"float32"}
    assert models.draft.target is models.target


@pytest.mark.auto_default  # The shipped schedule's windows, not the suite's one.
def test_auto_mode_compiles_all_of_its_loops_before_timing(spec, make_items):
    """k = "auto" runs the autoregressive fallback or a speculative loop compiled for the
    window its controller picks (1..k_max): all compile in the untimed warm-up, so no
    record times a compile."""
    tfspec.adaptive.reset()
    generator = generation.Generator(spec)
    target = generator.models.target

    def traces():
        return sum(fn.experimental_get_tracing_count()
                   for fn in tf_generation.compiled_loops(target))

    # A sampling setting no other test uses: every program of this test compiles here.
    args = generation.inference_args([("speculative_kauto", records.AUTO)],
                                     {"temperature": 0.9, "top_k": 7, "top_p": 1.0}, 0, MAX_NEW)
    first, second = make_items(1, samples=2)  # One prompt twice: one request shape.
    # The autoregressive loop and, per window, a speculative one: 1..k_max under the
    # formula's schedule (the default), one window (k_max) under Hugging Face's.
    auto = tfspec.AutoDraft()
    assert auto.draft_cost is not None  # The shipped default: one loop per window.
    loops = 1 + auto.k_max
    before = traces()
    (speculative,) = generator.run([first], args)
    assert traces() == before + loops  # The warm-up compiled every loop...
    (fallback,) = generator.run([second], args)  # A warm shape: no untimed call.
    # ...the controller explored (the shape's first timed request speculated, its second
    # ran the autoregressive fallback), and the timed calls compiled nothing.
    assert speculative["drafted"] > 0 and fallback["drafted"] == 0
    assert traces() == before + loops
    # A prompt of another bucket warms every window again: the warm-up's controllers are
    # not kept, so none of them has learnt a smaller window from the first bucket.
    width = tf_generation.prompt_bucket(len(generator._encode(first.example.prompt)))
    other = next(item for item in make_items(40)
                 if tf_generation.prompt_bucket(len(generator._encode(item.example.prompt)))
                 != width)
    generator.run([other], args)
    assert traces() == before + 2 * loops
