"""`python -m evals.report RUN_DIR ... --out REPORT_DIR` (see `evals.report.cli`)."""

import sys

from evals.report.cli import main

sys.exit(main())
