"""Tests of `python -m recipes.tiny_code.compare_objectives` on the smoke recipe."""

import json
import os

import pytest

from recipes.tiny_code import compare_objectives
from recipes.tiny_code import data as data_lib
from recipes.tiny_code.train import load_config
from tfspec import checkpoints
from tfspec.training import stages

from tests.tfspec.training.tiny_data import tiny_stages_data

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs",
                      "zoo_draft_objectives.py")


@pytest.fixture(scope="module")
def tiny_data():
    """The smoke recipe's data, patched in for the whole module (its fixtures share it)."""
    data = tiny_stages_data(load_config(CONFIG + ":smoke"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data_lib, "load_data", lambda _: data)
        yield data


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A random target and draft of the smoke recipe's shapes, saved as model directories."""
    config = load_config(CONFIG + ":smoke")
    directory = tmp_path_factory.mktemp("pair")
    paths = {}
    for role in (stages.TARGET, stages.DRAFT):
        paths[role] = str(directory / role)
        checkpoints.save_model(stages.build_model(config, role), paths[role], dtype="float32")
    return paths


@pytest.fixture(scope="module")
def compared(tiny_data, pair, tmp_path_factory):
    """One comparison run (the training is the slow part): (args, workdir, result, tmp)."""
    tmp = tmp_path_factory.mktemp("compare")
    workdir = str(tmp / "work")
    args = ["--config", CONFIG + ":smoke", "--workdir", workdir, "--no_progress",
            "--set", f"draft.target_from={pair['target']}",
            "--set", f"draft.init_from={pair['draft']}"]
    return args, workdir, compare_objectives.main([*args, "--json", str(tmp / "out.json")]), tmp


def test_trains_each_variant_from_the_initial_draft_and_measures_beta(compared):
    args, workdir, comparison, tmp_path = compared
    args = [*args, "--json", str(tmp_path / "out.json")]
    rows = {r["variant"]: r for r in comparison["rows"]}
    assert list(rows) == ["initial", "smoke"]
    assert rows["smoke"]["divergence"] == "tv" and rows["smoke"]["steps"] == 4
    for r in rows.values():
        assert 0.0 <= r["beta_t1"] <= 1.0 and 0.0 <= r["beta_t0"] <= 1.0
    # The fine-tuned draft moved away from its initial weights (4 TV steps at lr 3e-4).
    assert rows["smoke"]["beta_t1"] != rows["initial"]["beta_t1"]
    # The draft's own samples were generated once, cached and shared.
    draft_dir = os.path.join(workdir, "smoke", "draft")
    samples = [json.loads(line) for line in open(os.path.join(draft_dir, stages.ON_POLICY_FILE))]
    assert len(samples) == 4 and all(s["id"].startswith("on_policy:") for s in samples)
    assert os.path.exists(os.path.join(workdir, "shared", stages.ON_POLICY_FILE))
    with open(tmp_path / "out.json", encoding="utf-8") as f:
        assert json.load(f)["rows"] == comparison["rows"]
    # Resuming reuses the finished variant and its measurement.
    again = compare_objectives.main(args)
    assert again["rows"] == comparison["rows"]


def test_card_section_and_export(compared, pair, tmp_path):
    """On the finished comparison (resumed, not retrained): the card and the export."""
    args, _, _, _ = compared
    card = tmp_path / "MODEL_CARD.md"
    card.write_text("# draft\n\n## Training\n\nold\n\n## Reproduce\n\nrun it\n")
    shipped = tmp_path / "shipped"
    checkpoints.save_model(checkpoints.load_model(pair["draft"]), str(shipped),
                           dtype="bfloat16")
    (shipped / "MODEL_CARD.md").write_text("kept\n")
    before = (shipped / "model.safetensors").read_bytes()
    args = [*args, "--card", str(card), "--export", "smoke", "--export_dir", str(shipped)]
    compare_objectives.main(args)
    compare_objectives.main(args)  # Again: the section is replaced, not added twice.
    text = card.read_text()
    assert text.count(compare_objectives.CARD_SECTION) == 1
    assert "| smoke | tv |" in text and "Shipped: `smoke`" in text
    assert text.index("## Training") < text.index("## Reproduce") < text.index(
        compare_objectives.CARD_SECTION)
    assert (shipped / "MODEL_CARD.md").read_text() == "kept\n"
    assert (shipped / "model.safetensors").read_bytes() != before


def test_a_draft_of_other_shapes_is_refused(tiny_data, pair, tmp_path):
    with pytest.raises(ValueError, match="does not match the recipe's draft"):
        compare_objectives.main(["--config", CONFIG + ":smoke", "--workdir",
                                 str(tmp_path / "w"), "--no_progress",
                                 "--set", f"draft.target_from={pair['target']}",
                                 "--set", f"draft.init_from={pair['target']}"])
