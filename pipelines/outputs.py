"""The output folder of a run: file names, checks, and reads/writes through Beam FileSystems.

Local paths and any file system Beam knows (`gs://` with `apache-beam[gcp]`) work alike.
Local whole-file writes are atomic (a temporary file renamed over the target), so a reader
never sees half a summary.json.
"""

import json
import os
import tempfile
from typing import Any, Optional

from apache_beam.io.filesystems import FileSystems

SUMMARY = "summary.json"
EXAMPLES = "examples.jsonl"
SWEEP = "sweep.json"
DEAD_LETTER = "dead_letter.jsonl"
RUN_CONFIG = "run_config.json"
# Files whose presence marks a folder as holding a run.
RUN_FILES = (RUN_CONFIG, EXAMPLES, SUMMARY)


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def join(directory: str, name: str) -> str:
    if is_local(directory):
        return os.path.join(local_path(directory), name)
    return FileSystems.join(directory, name)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return FileSystems.exists(path)


def read_bytes(path: str) -> bytes:
    if is_local(path):
        with open(local_path(path), "rb") as f:
            return f.read()
    with FileSystems.open(path) as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file (atomically on local disks)."""
    if is_local(path):
        path = local_path(path)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        return
    with FileSystems.create(path) as f:
        f.write(data)


def write_json(path: str, value: Any) -> None:
    write_bytes(path, (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False)
                       + "\n").encode("utf-8"))


def read_json(path: str) -> Any:
    return json.loads(read_bytes(path).decode("utf-8"))


def makedirs(directory: str) -> None:
    """Creates a local folder (object stores need none)."""
    if is_local(directory):
        os.makedirs(local_path(directory), exist_ok=True)


def check_output_dir(directory: str, resume: bool) -> Optional[str]:
    """Checks that a run can write to `directory`, without writing anything there.

    Args:
      directory: the output folder.
      resume: True to continue the run already in it.

    Returns:
      None if fine, else a one-line problem description with the fix.
    """
    if is_local(directory):
        path = os.path.abspath(local_path(directory))
        if os.path.exists(path) and not os.path.isdir(path):
            return f"--output_dir {directory} exists and is not a folder; choose another path"
        if resume:
            if not os.path.isfile(os.path.join(path, RUN_CONFIG)):
                return (f"--resume: {directory} holds no run ({RUN_CONFIG} is missing); "
                        f"check --output_dir or drop --resume")
            problem = _writable_folder(path)
            return f"--output_dir {directory}: {problem}" if problem else None
        if os.path.isdir(path) and any(os.path.exists(os.path.join(path, f))
                                       for f in RUN_FILES):
            return (f"--output_dir {directory} already holds a run; pass --resume to continue "
                    f"it or choose a new --output_dir")
        ancestor = path
        while not os.path.exists(ancestor):
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor):
            return f"cannot create --output_dir {directory}: {ancestor} is not a folder"
        problem = _writable_folder(ancestor)
        return f"cannot create --output_dir {directory}: {problem}" if problem else None
    try:
        FileSystems.get_filesystem(directory)
    except ValueError as e:
        return (f"--output_dir {directory}: {' '.join(str(e).split())} (for gs:// install "
                f"apache-beam[gcp])")
    run_config = join(directory, RUN_CONFIG)
    if resume and not exists(run_config):
        return f"--resume: {directory} holds no run ({RUN_CONFIG} is missing)"
    if not resume and any(exists(join(directory, f)) for f in RUN_FILES):
        return (f"--output_dir {directory} already holds a run; pass --resume to continue it "
                f"or choose a new --output_dir")
    return None


def _writable_folder(folder: str) -> Optional[str]:
    """None if a file can be created in `folder` (probed with a temporary folder)."""
    try:
        probe = tempfile.mkdtemp(dir=folder, prefix=".tfspec-write-probe-")
    except OSError as e:
        return f"{folder} is not writable ({e.strerror or e})"
    os.rmdir(probe)
    return None
