"""Every experiment config in configs/ loads and validates as evals.run flag values."""

import glob
import importlib
import importlib.util
import os

import pytest

from evals import published
from evals.orchestration import flags
from evals.orchestration import spec as run_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_DIR = os.path.join(ROOT, "configs")
# Training recipes (recipes.tiny_code.train), not evals.run configs: they only have to load.
TRAIN_CONFIGS = ("zoo_tiny_code.py", "zoo_draft_objectives.py", "zoo_tiny_code_eagle.py",
                 "zoo_tiny_code_medusa.py", "zoo_tiny_code_draft_te.py")
# Helpers the configs import, not configs themselves.
HELPER_MODULES = ("common.py",)


def _module(path):
    spec = importlib.util.spec_from_file_location(
        "_cfg_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config_files():
    return sorted(p for p in glob.glob(os.path.join(CONFIG_DIR, "*.py"))
                  if not os.path.basename(p).startswith("_")
                  and os.path.basename(p) not in HELPER_MODULES)


EVAL_CONFIGS = [p for p in _config_files() if os.path.basename(p) not in TRAIN_CONFIGS]
CASES = [(path, arg) for path in EVAL_CONFIGS
         for arg in getattr(_module(path), "VARIANTS", (None,))]


def _spec(path, arg):
    values = flags.load_config(path + (f":{arg}" if arg else ""))
    return run_spec.build_run_spec(values)


@pytest.mark.parametrize("path,arg", CASES,
                         ids=[f"{os.path.basename(p)}:{a}" for p, a in CASES])
def test_config_validates_as_evals_run_flags(path, arg):
    spec = _spec(path, arg)  # Raises UsageError on unknown keys or invalid values.
    assert spec.k > 0 and spec.baseline and spec.batch_size == 1
    assert spec.target and spec.draft


@pytest.mark.parametrize("path", EVAL_CONFIGS, ids=os.path.basename)
def test_docstring_gives_command_hardware_data(path):
    doc = _module(path).__doc__ or ""
    name = os.path.basename(path)
    assert f"python -m evals.run --config configs/{name}" in doc
    assert "Hardware" in doc and "Data" in doc and "ublished" in doc


@pytest.mark.parametrize("path", _config_files(), ids=os.path.basename)
def test_docstring_gives_command_and_numbers_measured_here(path):
    doc = _module(path).__doc__ or ""
    name = os.path.basename(path)
    assert f"--config configs/{name}" in doc
    assert "Measured here" in doc


@pytest.mark.parametrize("path", _config_files(), ids=os.path.basename)
def test_every_config_parses_its_arg_with_the_shared_parser(path, monkeypatch):
    """An unknown ARG gets the one message of `configs.common.variant`, and every ARG a
    config accepts goes through it."""
    name = os.path.basename(path)[:-3]
    module = _module(path)
    with pytest.raises(ValueError, match=f"^{name} takes (one of|no argument)"):
        module.get_config("no-such-variant")
    common = importlib.import_module("configs.common")
    seen = []
    real = common.variant
    monkeypatch.setattr(common, "variant", lambda *a, **k: seen.append(a) or real(*a, **k))
    for arg in getattr(module, "VARIANTS", (None,)):
        module.get_config(arg)
    assert len(seen) == len(getattr(module, "VARIANTS", (None,)))


def test_training_configs_load():
    for name in TRAIN_CONFIGS:
        config = _module(os.path.join(CONFIG_DIR, name)).get_config()
        assert config is not None


def test_every_published_row_has_a_config():
    specs = [(os.path.basename(p), _spec(p, a)) for p, a in CASES]
    for row in published.LEVIATHAN_TABLE2:
        if "small" not in row.draft.lower():
            continue  # The T5-large row shows a worse draft; no config reproduces it.
        match = [n for n, s in specs if s.task == row.task and s.k == row.k
                 and s.temperature == row.temperature and "t5-11b" in s.target
                 and "t5-small" in s.draft]
        assert match, row
        doc = _module(os.path.join(CONFIG_DIR, match[0])).__doc__
        assert f"{row.speedup}x" in doc and f"alpha = {row.alpha}" in doc
    for row in published.CHEN_TABLE1:
        match = [n for n, s in specs if s.task == row.task and s.k == row.k and not s.k_sweep
                 and s.temperature == row.temperature and s.top_p == row.top_p
                 and s.target.startswith("hf://")]
        assert match, row
        doc = _module(os.path.join(CONFIG_DIR, match[0])).__doc__
        assert f"{row.speedup}x" in doc
    sweeps = [s for n, s in specs if n == "chen_k_sweep.py"]
    assert sweeps and all(s.ks == tuple(range(8)) for s in sweeps)
    zoo = [s for n, s in specs if n == "zoo_k_sweep.py"]
    assert {(s.task, s.temperature) for s in zoo} == {
        ("humaneval", 0.0), ("humaneval", 1.0), ("docsum", 0.0), ("docsum", 1.0)}
    assert all(s.ks == tuple(range(9)) + ("auto",) for s in zoo)


def test_bad_variant_is_rejected():
    with pytest.raises(run_spec.UsageError, match="get_config failed"):
        flags.load_config(os.path.join(CONFIG_DIR, "zoo_k_sweep.py") + ":mmlu-t3")


@pytest.mark.parametrize("name", ["leviathan_t5xxl_wmt_ende.py", "leviathan_t5xxl_cnndm.py"])
@pytest.mark.parametrize("suffix", ["", ":t2"])
def test_leviathan_config_requires_t0_or_t1(name, suffix):
    with pytest.raises(run_spec.UsageError, match="t0, t1"):
        flags.load_config(os.path.join(CONFIG_DIR, name) + suffix)


def test_common_defaults_and_overrides():
    common = _module(os.path.join(CONFIG_DIR, "common.py"))
    config = common.run_config(k=3, top_p=0.9)
    assert config.to_dict() == {"top_k": 0, "top_p": 0.9, "batch_size": 1, "num_samples": 1,
                                "baseline": True, "seed": 0, "k": 3}
