"""The layers of evals read top-down: CLI -> orchestration -> Beam graph -> domain -> tfspec.

The domain modules (tasks, metrics, sandbox, records, summary, reports) import neither Beam
nor `pipelines` nor the orchestration; the entry point `evals.run` imports neither Beam nor
TensorFlow before it has parsed its flags.
"""

import json
import subprocess
import sys

import pytest

DOMAIN = ("evals.acceptance", "evals.bleu", "evals.console", "evals.datasources", "evals.docsum",
          "evals.example", "evals.humaneval", "evals.latency", "evals.provenance",
          "evals.published", "evals.records", "evals.report", "evals.rouge", "evals.sandbox",
          "evals.summarization", "evals.summary", "evals.tasks", "evals.translation",
          "evals.walltime")


def _loaded_after_import(module: str) -> set:
    code = (f"import importlib, json, sys; importlib.import_module({module!r}); "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", DOMAIN)
def test_domain_modules_import_no_beam_and_no_higher_layer(module):
    loaded = _loaded_after_import(module)
    higher = sorted(m for m in loaded if m == "apache_beam" or m.startswith(
        ("apache_beam.", "pipelines", "evals.orchestration", "evals.run")))
    assert not higher, f"{module} imports {higher[:5]}"


def test_entry_point_is_light_until_it_runs():
    loaded = _loaded_after_import("evals.run")
    assert "apache_beam" not in loaded and "tensorflow" not in loaded
    assert "evals.orchestration.flags" in loaded
