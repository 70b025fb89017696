"""Tiny random models shared by the benchmark tests."""

TINY = "random:t5-small:vocab_size=64,d_model=32,d_kv=8,d_ff=64,num_layers=1,num_heads=2"
TINY_DRAFT = "random:t5-small:vocab_size=64,d_model=16,d_kv=8,d_ff=32,num_layers=1,num_heads=2"

CONTRACT_KEYS = ("ar_ms_per_token", "spec_ms_per_token", "speedup", "acceptance_rate",
                 "beta_mean", "draft_cost_ratio", "predicted_speedup",
                 "speedup_over_predicted")

# A checkpoint with a tokenizer (--prompts files are encoded with the target's tokenizer).
ZOO_TARGET = "zoo:tiny-code-target"
# t5-small shape cut down, with the zoo tokenizer's 8192 ids (for bench.loop_overhead --preset).
TINY_PRESET_8192 = "t5-small:vocab_size=8192,d_model=16,d_kv=4,d_ff=16,num_layers=1,num_heads=2"
PROMPT_TEXTS = ("def add(a, b):\n    return", "import os\n\nprint(os.", "class Stack:\n    def")


def write_prompts(path, texts=PROMPT_TEXTS, extra_lines=()) -> str:
    """A --prompts JSONL file: one {"prompt": text} line per text, then `extra_lines` as is."""
    import json  # pylint: disable=import-outside-toplevel

    lines = [json.dumps({"prompt": t}) for t in texts] + list(extra_lines)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def save_feature_draft(directory, target_spec=TINY, seed=2, **overrides) -> str:
    """Saves a random `tfspec.models.FeatureDraft` for the (random) target of `target_spec`
    and returns its directory, a --draft SPEC. `overrides`: `FeatureDraftConfig` fields, e.g.
    target_fingerprint="..." for a draft trained for another target (which it refuses)."""
    import tfspec  # pylint: disable=import-outside-toplevel
    from bench import models as bench_models  # pylint: disable=import-outside-toplevel
    from tfspec.models import FeatureDraft, FeatureDraftConfig  # pylint: disable=import-outside-toplevel

    target = bench_models.load(target_spec, seed=0)  # As bench_models.load_pair loads it.
    config = FeatureDraftConfig.for_target(target, **{"d_ff": 32, **overrides})
    return tfspec.save_model(FeatureDraft(config, seed=seed), str(directory))


# A fingerprint no target has: the draft refuses every target, in one line.
FOREIGN = dict(target_fingerprint="0123456789abcdef", target_name="zoo:some-other-target")


def save_medusa_heads(directory, target_spec=TINY, seed=3, **overrides) -> str:
    """Saves random `tfspec.models.MedusaHeads` (3 heads) for the (random) target of
    `target_spec` and returns the directory, a --medusa SPEC."""
    import tfspec  # pylint: disable=import-outside-toplevel
    from bench import models as bench_models  # pylint: disable=import-outside-toplevel
    from tfspec.models import MedusaConfig, MedusaHeads  # pylint: disable=import-outside-toplevel

    target = bench_models.load(target_spec, seed=0)
    config = MedusaConfig.for_target(target, **{"heads": 3, "d_ff": 16, **overrides})
    return tfspec.save_model(MedusaHeads(config, seed=seed), str(directory))


def assert_usage_error(main_fn, *args: str, capsys, expect=("error:",)) -> None:
    """`main_fn(args)` (a benchmark's `main`) exits with status 2 before any work, each
    string of `expect` on stderr: the in-process form of `assert_fails_in_one_line`, for
    the flags that fail in argument parsing (a subprocess imports TensorFlow: seconds)."""
    import pytest  # pylint: disable=import-outside-toplevel

    with pytest.raises(SystemExit) as exit_info:
        main_fn(list(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for text in expect:
        assert text in err, err


def assert_fails_in_one_line(module: str, *args: str, expect=("error:",)) -> None:
    """`python -m MODULE ARGS...` exits with status 2, no traceback, each string of
    `expect` on stderr."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel

    result = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    for text in expect:
        assert text in result.stderr, result.stderr


def assert_side_by_side_records(records, modes) -> None:
    """`bench.side_by_side` records, one per "<k>@<batch>" of `modes` at temperature 0:
    tokens decoded, finite positive times, and the fixed time saved is their difference."""
    import math  # pylint: disable=import-outside-toplevel

    import pytest  # pylint: disable=import-outside-toplevel

    assert [(r["mode"], r["temperature"]) for r in records] == [(m, 0.0) for m in modes]
    for record in records:
        assert record["tokens"] > 0 and isinstance(record["same_tokens"], bool)
        for key in ("ms_per_request", "xla_ms_per_request", "speedup", "fixed_ms",
                    "xla_fixed_ms"):
            assert math.isfinite(record[key]) and record[key] > 0, key
        assert record["fixed_saved_ms"] == pytest.approx(
            record["xla_fixed_ms"] - record["fixed_ms"])
