"""Keeps TensorFlow's native (C++) start-up logs out of the terminal, in one place.

`tfspec/__init__.py` imports this module before anything imports TensorFlow, so the library,
`evals.*`, `pipelines.*` and `bench.*` are all quiet: TensorFlow's C++ logging is set to
errors only (`TF_CPP_MIN_LOG_LEVEL=2`, which must be set before TensorFlow loads), and the
lines its shared libraries print before that setting is even read (absl's "All log messages
before absl::InitializeLog() ..." banner, oneDNN, CUDA stub, cpu_feature_guard, and a failed
`cuInit` on machines without a GPU) are captured while TensorFlow is imported and its
platforms are listed. The capture is replayed on stderr if the import fails. TensorFlow's
Python warning that a function "triggered tf.function retracing" is dropped too for the
functions that tfspec and its benchmarks trace once per shape on purpose (the decoding
loop, per (batch, prompt bucket); the benchmarks' compiled loops, per product or
component): their builders register with `expect_retracing`; a user's own functions still
warn.

Verbose mode shows everything: set `TFSPEC_VERBOSE=1`, or pass `--verbose` to any entry
point (`python -m evals.run`, `python -m bench.*`, ...; the flag is read here, at import,
because the logs are printed before any argument parser runs).
"""

import logging
import os
import sys
import tempfile

VERBOSE_ENV = "TFSPEC_VERBOSE"


def verbose() -> bool:
    """True when the user asked for TensorFlow's native logs."""
    value = os.environ.get(VERBOSE_ENV, "").strip().lower()
    return value in ("1", "true", "yes", "on") or "--verbose" in sys.argv[1:]


class CapturedStderr:
    """Sends file descriptor 2 (Python and C++ writers alike) to a temporary file.

    `replay()` copies what was captured to the real stderr (used when something fails).
    """

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)
        return self

    def restore(self) -> None:
        """Puts the real stderr back (idempotent)."""
        if self._saved is not None:
            sys.stderr.flush()
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._saved = None

    def replay(self) -> None:
        self.restore()
        self._file.seek(0)
        sys.stderr.write(self._file.read().decode("utf-8", "replace"))
        sys.stderr.flush()

    def __exit__(self, exc_type, *unused):
        if exc_type is not None:
            self.replay()
        self.restore()
        self._file.close()
        return False


# Qualified-name prefixes ("<builder>.<locals>.") of functions traced per shape on purpose.
_EXPECTED_RETRACING = set()


def expect_retracing(builder) -> None:
    """Silences the retracing warning of every function defined inside `builder` (a function
    or method that returns tf.functions traced once per input shape on purpose)."""
    _EXPECTED_RETRACING.add(f"<function {builder.__qualname__}.<locals>.")


class _DropLoopRetracingWarnings(logging.Filter):
    """Drops TensorFlow's retracing warning about the functions of `expect_retracing`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not ("triggered tf.function retracing" in message
                    and any(prefix in message for prefix in _EXPECTED_RETRACING))


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow (once per process) without its native start-up lines."""
    if verbose():
        return
    tf_logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _DropLoopRetracingWarnings) for f in tf_logger.filters):
        tf_logger.addFilter(_DropLoopRetracingWarnings())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:  # Someone imported it first: too late to capture.
        return
    try:
        os.fstat(2)
    except OSError:  # No stderr at all (daemonised): nothing to keep quiet.
        return
    with CapturedStderr():
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        # Listing the devices initialises the platforms (CUDA's failed cuInit is logged
        # here); it does not start the runtime, so logical devices can still be configured.
        tf.config.list_physical_devices()
