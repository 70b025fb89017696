"""Tests for pipelines.outputs: folder checks and whole-file writes."""

import os

from pipelines import outputs


def test_write_json_is_atomic_and_leaves_no_temporary_files(tmp_path):
    path = str(tmp_path / "summary.json")
    outputs.write_json(path, {"a": 1, "b": "\u00e9"})
    outputs.write_json(path, {"a": 2})
    assert outputs.read_json(path) == {"a": 2}
    assert os.listdir(tmp_path) == ["summary.json"]


def test_check_output_dir(tmp_path):
    assert outputs.check_output_dir(str(tmp_path / "new" / "run"), resume=False) is None
    (tmp_path / "old").mkdir()
    assert outputs.check_output_dir(str(tmp_path / "old"), resume=False) is None  # Empty.
    (tmp_path / "old" / outputs.EXAMPLES).write_text("")
    assert "already holds a run" in outputs.check_output_dir(str(tmp_path / "old"), False)
    assert "holds no run" in outputs.check_output_dir(str(tmp_path / "old"), True)
    (tmp_path / "old" / outputs.RUN_CONFIG).write_text("{}")
    assert outputs.check_output_dir(str(tmp_path / "old"), True) is None
    assert "nosuchfs://" in outputs.check_output_dir("nosuchfs://bucket/run", False)
    assert sorted(os.listdir(tmp_path)) == ["old"]
