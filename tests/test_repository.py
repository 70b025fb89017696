"""The repository stands alone: no text file refers to a file outside it."""

import os
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# What a reference to something outside the repository looks like: a parent-folder path,
# the out-of-repository design document or shared folder of the workspace it was built in,
# or an absolute path of that workspace. (Written so that this file does not match itself.)
OUTSIDE = re.compile(r"\.\./|(?<![\w.-])shared[/]|DESIGN\.md|/work[/]|/home[/]")
SKIPPED_DIRS = {".git", "runs", "__pycache__", ".pytest_cache", "build", "dist"}


def _text_files():
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name == ".git":  # A worktree's pointer file.
                continue
            path = pathlib.Path(folder) / name
            data = path.read_bytes()
            if b"\0" in data[:8192]:
                continue  # Binary: weights, figures, fixtures.
            yield path, data.decode("utf-8", "replace")


def outside_references(text: str):
    """(line number, line) of every line that refers to a file outside the repository."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)]


# Assembled from pieces so that this file itself holds no outside reference.
@pytest.mark.parametrize("line", [
    f"see `{os.pardir}/{'shared'}/{'DESIGN'}.md`", f"Papers in {os.pardir}/papers/.",
    f"{'DESIGN'}.md section 6", f"pip install -e /{'work'}/main",
    f"notes in {'shared'}/notes.txt"])
def test_the_pattern_finds_outside_references(line):
    assert outside_references(line)


@pytest.mark.parametrize("line", [
    "docs/design.md section 6", "a shared SentencePiece vocabulary", "multi_process_shared",
    "`tfspec/zoo/NAME/spiece.model`", "f\"zoo:{os.pardir}/etc\""])
def test_the_pattern_leaves_inside_references_alone(line):
    assert not outside_references(line)


def test_no_text_file_refers_outside_the_repository():
    found = [f"{path.relative_to(REPO)}:{number}: {line}"
             for path, text in _text_files() for number, line in outside_references(text)]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


def test_the_design_document_is_in_the_repository_and_referenced():
    design = REPO / "docs" / "design.md"
    assert design.is_file()
    text = design.read_text(encoding="utf-8")
    for contract in ("summary.json", "examples.jsonl", "sweep.json", "tfspec.load_model",
                     "--k_sweep", "prompt_sha256"):
        assert contract in text, contract
    for pointer in ("README.md", "WORKSPACE.md", "evals/run.py"):
        assert "docs/design.md" in (REPO / pointer).read_text(encoding="utf-8"), pointer
