"""What a worker is doing now, for the driver's progress display.

Workers call `report_phase("...")`; it writes one line of text to the status file named by
the environment variable TFSPEC_STATUS_FILE (set by the driver for the runner's local worker
processes, read by `evals.orchestration.progress`), and does nothing where it is unset (on
remote workers, or without a display).
"""

import os
import threading

STATUS_ENV = "TFSPEC_STATUS_FILE"


def report_phase(text: str) -> None:
    """Tells the driver's display what this worker is doing now (no-op without a display)."""
    path = os.environ.get(STATUS_ENV)
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(" ".join(str(text).split()))
        os.replace(tmp, path)  # Whole lines only: the reader never sees a partial phase.
    except OSError:
        pass
