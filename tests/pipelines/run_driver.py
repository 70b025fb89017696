"""Runs `evals.run` in this process with each generate call slowed down and logged.

    python tests/pipelines/run_driver.py LOG DELAY_S -- [evals.run flags]

Every (id, sample, mode) the generator produces is appended to LOG (one JSON list per line),
so tests can kill a run halfway and check which keys a resumed run generates again. Only
the in-process DirectRunner sees the patch.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main():
    log_path, delay = sys.argv[1], float(sys.argv[2])
    argv = sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:]

    from pipelines import generation  # pylint: disable=import-outside-toplevel

    original = generation.Generator._generate  # pylint: disable=protected-access

    def slow_and_logged(self, rows, mode, k, args):
        time.sleep(delay)
        out = original(self, rows, mode, k, args)
        with open(log_path, "a", encoding="utf-8") as f:
            for r in out:
                f.write(json.dumps([r["id"], r["sample"], r["mode"]]) + "\n")
        return out

    generation.Generator._generate = slow_and_logged  # pylint: disable=protected-access

    from evals import run  # pylint: disable=import-outside-toplevel
    sys.exit(run.main(argv))


if __name__ == "__main__":
    main()
