"""Tests of the `python -m recipes.tiny_code.train` command line on a tiny recipe."""

import json
import os
import shutil

import numpy as np
import pytest

from recipes.tiny_code import data as data_lib
from recipes.tiny_code.train import load_config, main, parse_args
from tfspec.training import distill, stages, trainer as trainer_lib
from tfspec.training import feature_draft as feature_draft_training
from tfspec.training import target_encoder_draft as target_encoder_lib

from tests.tfspec.training.tiny_data import tiny_stages_data

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs",
                      "zoo_tiny_code.py")
FLAGS = ["--no_progress", "--set", "target.warmup_steps=1", "--set", "draft.warmup_steps=1",
         "--set", "target.eval_every=0", "--set", "draft.eval_every=0",
         "--set", "export.num_prompts=2", "--set", "export.max_new_tokens=3",
         "--set", "export.latency_prompts=0", "--set", "draft.generated_prompts=0"]


@pytest.fixture
def tiny_data(monkeypatch):
    """`data.load_data` on a 4-function fake corpus (no corpus build in tests)."""
    data = tiny_stages_data(load_config(CONFIG + ":smoke"))
    monkeypatch.setattr(data_lib, "load_data", lambda _: data)
    return data


def test_stage_all_runs_target_draft_export_then_skips_them(tiny_data, tmp_path, capsys):
    workdir, zoo = str(tmp_path / "work"), str(tmp_path / "zoo")
    args = ["--config", CONFIG + ":smoke", "--workdir", workdir, "--zoo_dir", zoo,
            "--max_steps", "2"] + FLAGS
    results = main(args)
    assert list(results) == ["target", "draft", "export"]
    assert results["target"]["steps"] == results["draft"]["steps"] == 2
    for name in ("tiny-code-target", "tiny-code-draft"):
        assert os.path.exists(os.path.join(zoo, name, "MODEL_CARD.md"))
    log = trainer_lib.read_log(os.path.join(workdir, "target", "log.jsonl"))
    # The smoke recipe logs every 5 steps, and always at the last step; then validates.
    assert [(r["step"], "loss" in r, "validation_loss" in r) for r in log] == [
        (2, True, False), (2, False, True)]
    capsys.readouterr()
    assert main(args) == {}
    assert capsys.readouterr().err.count("already done, skipped") == 3


def test_single_stage_and_errors(tiny_data, tmp_path):
    workdir = str(tmp_path / "work")
    with pytest.raises(RuntimeError, match="target stage"):
        main(["--config", CONFIG + ":smoke", "--workdir", workdir, "--stage", "draft"]
             + FLAGS)
    with pytest.raises(FileNotFoundError):
        main(["--config", "no/such/config.py"])
    assert parse_args(["--config", "x"]).stage == "all"
    with pytest.raises(SystemExit):
        parse_args(["--config", "x", "--stage", "everything"])


def test_a_capped_stage_is_continued_by_a_longer_run(tiny_data, tmp_path):
    workdir = str(tmp_path / "work")
    base = ["--config", CONFIG + ":smoke", "--workdir", workdir, "--stage", "target"] + FLAGS
    main(base + ["--max_steps", "1"])
    config = load_config(CONFIG + ":smoke")
    assert stages.stage_done(workdir, "target")
    assert stages.stage_done(workdir, "target", 1, config)
    assert not stages.stage_done(workdir, "target", None, config)  # The recipe wants 20.
    results = main(base + ["--max_steps", "3"])
    assert results["target"]["steps"] == 3
    steps = [r["step"] for r in trainer_lib.read_log(os.path.join(workdir, "target",
                                                                  "log.jsonl")) if "loss" in r]
    assert steps == [1, 3]


def _train_stage(flags, workdir, stage, steps):
    """Runs one training stage for `steps` steps (it must take them all); returns its log."""
    assert main(flags + ["--stage", stage, "--max_steps", str(steps)])[stage]["steps"] == steps
    return trainer_lib.read_log(os.path.join(workdir, stage, "log.jsonl"))


MEDUSA_CONFIG = os.path.join(os.path.dirname(CONFIG), "zoo_tiny_code_medusa.py")


def _bound_draft_flags(tmp_path, config, stage):
    """(workdir, zoo_dir, flags): a smoke target trained for one step in WORKDIR, and the
    flags of `config`'s smoke recipe for the bound draft stage `stage` on it."""
    workdir, zoo = str(tmp_path / "work"), str(tmp_path / "zoo")
    main(["--config", CONFIG + ":smoke", "--workdir", workdir, "--stage", "target",
          "--max_steps", "1"] + FLAGS)
    return workdir, zoo, ["--config", config + ":smoke", "--workdir", workdir, "--zoo_dir",
                          zoo, "--set", f"{stage}.warmup_steps=1"] + FLAGS


def test_medusa_stage_trains_heads_on_the_finished_target_and_exports_them(tiny_data,
                                                                           tmp_path):
    workdir, zoo, medusa = _bound_draft_flags(tmp_path, MEDUSA_CONFIG, "medusa")
    log = _train_stage(medusa, workdir, "medusa", 2)
    assert {"overlap_1", "overlap_3", "greedy_match_3"} <= set(log[0])
    exported = main(medusa + ["--stage", "medusa_export"])["medusa_export"]
    # The smoke recipe: 4 sampled and 2 greedy continuations, counted apart.
    assert (exported["sampled_examples"], exported["greedy_examples"]) == (4, 2)
    card = open(os.path.join(zoo, "tiny-code-medusa", "MODEL_CARD.md")).read()
    assert "Medusa heads" in card and exported["size_mb"] < 15


EAGLE_CONFIG = os.path.join(os.path.dirname(CONFIG), "zoo_tiny_code_eagle.py")


def test_feature_draft_stage_trains_on_sampled_and_greedy_continuations_and_exports(
        tiny_data, tmp_path):
    workdir, zoo, eagle = _bound_draft_flags(tmp_path, EAGLE_CONFIG, "feature_draft")
    log = _train_stage(eagle, workdir, "feature_draft", 2)
    assert {"overlap_1", "overlap_2", "greedy_match_2"} <= set(log[0])
    stage = os.path.join(workdir, "feature_draft")
    sampled = distill.load_examples(os.path.join(stage, "sampled.jsonl"))
    greedy = distill.load_examples(os.path.join(stage, "greedy.jsonl"))
    # The smoke recipe: 4 sampled and 3 greedy continuations.
    assert (len(sampled), len(greedy)) == (4, 3)
    assert all(e.id.startswith("greedy") for e in greedy)
    exported = main(eagle + ["--stage", "feature_draft_export"])["feature_draft_export"]
    assert (exported["sampled_examples"], exported["greedy_examples"]) == (4, 3)
    card = open(os.path.join(zoo, "tiny-code-eagle", "MODEL_CARD.md")).read()
    assert "greedy continuations of 3 other training prompts" in card
    assert exported["size_mb"] < 15
    # Its draft vocabulary resized in place: the most frequent target tokens of the stage's
    # examples (corpus and cached continuations), EOS in; every other weight the same;
    # acceptance measured with both vocabularies.
    from tfspec import checkpoints  # pylint: disable=import-outside-toplevel
    directory = os.path.join(zoo, "tiny-code-eagle")
    head = checkpoints.load_model(directory)
    resized = main(eagle + ["--set", "feature_draft.draft_vocab_size=64", "--stage",
                            "feature_draft_vocabulary"])["feature_draft_vocabulary"]
    assert (resized["size_before"], resized["size_after"]) == (200, 64)
    assert [[row["temperature"] for row in resized["acceptance"][label]]
            for label in ("before", "after")] == [[0.0, 1.0]] * 2
    again = checkpoints.load_model(directory)
    ids = again.draft_vocab.numpy().tolist()
    counts = np.bincount(np.concatenate([e.target_ids for e in list(tiny_data.train)
                                         + sampled + greedy]), minlength=8192)
    assert len(ids) == 64 and ids == sorted(ids) and 1 in ids
    assert min(counts[ids]) >= max(np.delete(counts, ids + [1]))
    old_weights, new_weights = head.weight_map(), again.weight_map()
    assert set(old_weights) == set(new_weights)
    for name, (variable, _) in new_weights.items():
        if name != "draft_vocab":
            np.testing.assert_array_equal(variable.numpy(), old_weights[name][0].numpy())
    assert json.load(open(os.path.join(directory, "config.json")))["draft_vocab_size"] == 64
    assert sorted(os.listdir(directory)) == sorted(["MODEL_CARD.md", "config.json",
                                                    "model.safetensors"])


@pytest.mark.parametrize("export_first,size,error", [
    (False, 64, "holds no feature draft"),
    (True, 0, "feature_draft.draft_vocab_size is 0; expected 1..8192"),
    (True, 9000, "expected 1..8192"),
])
def test_the_feature_draft_vocabulary_stage_refuses_what_it_cannot_resize(
        tmp_path, capsys, export_first, size, error):
    from recipes.tiny_code.train import run
    zoo = tmp_path / "zoo"
    if export_first:  # A feature draft to resize (random weights: the stage refuses first).
        from tfspec import checkpoints
        from tfspec.models import feature_draft as feature_draft_models
        target = stages.build_model(load_config(CONFIG + ":smoke"), stages.TARGET)
        draft = feature_draft_models.FeatureDraft(
            feature_draft_models.FeatureDraftConfig.for_target(target, draft_vocab_size=200))
        draft.bind(target)
        checkpoints.save_model(draft, str(zoo / "tiny-code-eagle"))
    assert run(["--config", EAGLE_CONFIG + ":smoke", "--workdir", str(tmp_path / "work"),
                "--zoo_dir", str(zoo), "--no_progress", "--stage", "feature_draft_vocabulary",
                "--set", f"feature_draft.draft_vocab_size={size}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("python -m recipes.tiny_code.train: error:") and error in err


TE_CONFIG = os.path.join(os.path.dirname(CONFIG), "zoo_tiny_code_draft_te.py")


def test_target_encoder_adapter_stage_writes_the_adapter_beside_the_exported_draft(
        tiny_data, tmp_path):
    from tfspec import checkpoints
    workdir, zoo = str(tmp_path / "work"), str(tmp_path / "zoo")
    main(["--config", CONFIG + ":smoke", "--workdir", workdir, "--zoo_dir", zoo,
          "--max_steps", "1"] + FLAGS)  # target, draft, export
    draft_dir = os.path.join(zoo, "tiny-code-draft")
    weights = open(os.path.join(draft_dir, checkpoints.WEIGHTS_FILE), "rb").read()
    metrics = main(["--config", TE_CONFIG + ":smoke", "--workdir", workdir, "--zoo_dir", zoo,
                    "--stage", "target_encoder_adapter"] + FLAGS)["target_encoder_adapter"]
    assert os.path.exists(os.path.join(draft_dir, checkpoints.TARGET_ENCODER_FILE))
    # The draft's own files are untouched; loaded, it reads its target's encoder.
    assert open(os.path.join(draft_dir, checkpoints.WEIGHTS_FILE), "rb").read() == weights
    assert checkpoints.load_model(draft_dir).reads_target_encoder
    assert set(metrics["acceptance"]) == {"target encoder", "own encoder"}


def test_target_encoder_draft_stage_trains_exports_then_continues_the_export(tiny_data,
                                                                              tmp_path):
    """The stage trains a draft that reads the target's encoder and exports it with its
    adapter. The adapter-only stage does not overwrite that fine-tuned adapter with a
    least-squares one, and the export can be continued (init_from) with its adapter.
    (One flow: each stage needs the ones before it, which cost most of the time.)"""
    from tfspec import checkpoints
    workdir, zoo = str(tmp_path / "work"), str(tmp_path / "zoo")
    main(["--config", CONFIG + ":smoke", "--workdir", workdir, "--zoo_dir", zoo,
          "--max_steps", "1"] + FLAGS)  # target, draft, export
    exported = os.path.join(zoo, "tiny-code-draft")
    before = open(os.path.join(exported, "MODEL_CARD.md")).read().splitlines()[2]
    flags = ["--config", TE_CONFIG + ":smoke", "--workdir", workdir, "--zoo_dir", zoo,
             "--set", "target_encoder_draft.warmup_steps=1"] + FLAGS
    log = _train_stage(flags, workdir, "target_encoder_draft", 2)
    assert {"loss", "kl", "overlap"} <= set(log[0])
    # The target's own continuations join the corpus (the smoke recipe asks for 4).
    generated = distill.load_examples(
        os.path.join(workdir, "target_encoder_draft", stages.GENERATED_FILE))
    assert len(generated) == 4
    exported_metrics = main(flags + ["--stage", "target_encoder_draft_export"])[
        "target_encoder_draft_export"]
    # The export replaced the draft; its card keeps the one it replaced, once.
    card = open(os.path.join(exported, "MODEL_CARD.md")).read()
    assert "reads the target's encoder output" in card and exported_metrics["size_mb"] < 15
    assert "Draft vocabulary: the 4096 most frequent target tokens" in card
    assert card.count(target_encoder_lib.BEFORE_HEADING) == 1 and before in card
    assert os.path.exists(os.path.join(exported, checkpoints.TARGET_ENCODER_FILE))
    assert checkpoints.load_model(exported).reads_target_encoder
    rates = exported_metrics["acceptance"]["tiny-code-draft"]
    assert [row["temperature"] for row in rates] == [0.0, 1.0]
    with pytest.raises(FileExistsError, match="already reads its target's encoder"):
        main(flags + ["--stage", "target_encoder_adapter"])
    # Its draft vocabulary resized in place: the most frequent target tokens, EOS in; the
    # weights untouched; acceptance measured with both vocabularies.
    weights = open(os.path.join(exported, checkpoints.WEIGHTS_FILE), "rb").read()
    resized = main(flags + ["--set", "target_encoder_draft.draft_vocab_size=64", "--stage",
                            "target_encoder_draft_vocabulary"])[
        "target_encoder_draft_vocabulary"]
    ids = json.load(open(os.path.join(exported, checkpoints.DRAFT_VOCABULARY_FILE)))["ids"]
    counts = np.bincount(np.concatenate([e.target_ids for e in tiny_data.train]),
                         minlength=8192)
    assert len(ids) == 64 and ids == sorted(ids) and 1 in ids
    assert min(counts[ids]) >= max(np.delete(counts, ids + [1]))
    assert (resized["size_before"], resized["size_after"]) == (4096, 64)
    assert [[row["temperature"] for row in resized["acceptance"][label]]
            for label in ("before", "after")] == [[0.0, 1.0]] * 2
    assert open(os.path.join(exported, checkpoints.WEIGHTS_FILE), "rb").read() == weights
    assert len(checkpoints.load_model(exported).draft_vocab_ids) == 64
    # An export is a starting point too: continued with its own adapter (no new fit), on
    # the target's sampled and greedy continuations when the recipe asks for them, and
    # grown by an identity decoder block when it asks for more layers.
    again = str(tmp_path / "again")
    shutil.copytree(os.path.join(workdir, "target"), os.path.join(again, "target"))
    continued = flags + ["--workdir", again, "--set", f"target_encoder_draft.init_from={exported}",
                         "--set", "target_encoder_draft.sampled_prompts=2",
                         "--set", "target_encoder_draft.greedy_prompts=1",
                         "--set", "target_encoder_draft.generated_prompts=0",
                         "--set", "target_encoder_draft.decoder_layers=2"]
    _train_stage(continued, again, "target_encoder_draft", 1)
    stage_dir = os.path.join(again, "target_encoder_draft")
    assert [len(distill.load_examples(os.path.join(stage_dir, name)))
            for name in (stages.SAMPLED_FILE, stages.GREEDY_FILE)] == [2, 1]
    assert not os.path.exists(os.path.join(stage_dir, stages.GENERATED_FILE))
    infos = [json.load(open(os.path.join(d, "target_encoder_draft", "stage.json")))
             for d in (workdir, again)]
    assert [info["continued"] for info in infos] == [False, True]
    assert [(info["grown_from"], info["model_config"]["num_decoder_layers"])
            for info in infos] == [(None, 1), (1, 2)]
    config = load_config(TE_CONFIG + ":smoke", [f"target_encoder_draft.init_from={exported}",
                                                "target_encoder_draft.decoder_layers=2"])
    target = feature_draft_training.frozen_target(config, again,
                                                  config.target_encoder_draft)
    start = target_encoder_lib.build_adapted_draft(config, again, target, tiny_data)
    assert (start.grown_from, len(start.draft.decoder_blocks)) == (1, 2)
    np.testing.assert_array_equal(
        start.projection.numpy(),
        checkpoints.load_model(exported, dtype="float32").target_encoder_projection.numpy())


@pytest.mark.parametrize("export_first,size,error", [
    (False, 64, "holds no draft checkpoint"),
    (True, 0, "set target_encoder_draft.draft_vocab_size"),
    (True, 9000, "expected 1..8192"),
])
def test_the_vocabulary_stage_refuses_what_it_cannot_resize(tmp_path, capsys, export_first,
                                                           size, error):
    from recipes.tiny_code.train import run
    zoo = tmp_path / "zoo"
    if export_first:  # A checkpoint to resize (random weights: the stage refuses first).
        from tfspec import checkpoints
        model = stages.build_model(load_config(CONFIG + ":smoke"), stages.DRAFT)
        checkpoints.save_model(model, str(zoo / "tiny-code-draft"))
    assert run(["--config", TE_CONFIG + ":smoke", "--workdir", str(tmp_path / "work"),
                "--zoo_dir", str(zoo), "--no_progress", "--stage",
                "target_encoder_draft_vocabulary", "--set",
                f"target_encoder_draft.draft_vocab_size={size}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert error in err


def test_the_commands_refusal_is_one_line(tmp_path, capsys):
    from recipes.tiny_code.train import run
    assert run(["--config", str(tmp_path / "missing.py")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m recipes.tiny_code.train: error:") and "\n" not in err
