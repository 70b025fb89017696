"""tfspec.quiet: importing tfspec keeps TensorFlow's native logs off the terminal."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# TensorFlow's native log lines: absl's banner, glog-style "I0000 00:00:..." lines, and the
# CPU-feature note.
NATIVE_LOG = re.compile(r"absl::InitializeLog|^[IWEF]\d{4} \d\d:\d\d:\d\d|cpu_feature_guard|"
                        r"oneDNN custom operations", re.M)
TINY_DECODE = """
import tfspec
from tfspec.models import T5, T5Config
config = T5Config(vocab_size=8, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_decoder_layers=1,
                  num_heads=2, relative_attention_num_buckets=4,
                  relative_attention_max_distance=8, feed_forward_proj="relu",
                  tie_word_embeddings=False, layer_norm_epsilon=1e-6, pad_token_id=0,
                  eos_token_id=1, decoder_start_token_id=0)
target, draft = T5(config, seed=0), T5(config, seed=1)
gen = tfspec.generate(target, [[3, 4, 5]], draft=draft, k=2, max_new_tokens=4, eos_id=None)
print("decoded", gen.tokens.shape)
"""


def _python(code, *args, **env_overrides):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TFSPEC_VERBOSE")}  # As a user's shell has.
    env.update(PYTHONPATH=str(REPO), **env_overrides)
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_import_and_a_tiny_decode_print_no_native_log_line():
    result = _python(TINY_DECODE)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "decoded (1, 4)" in result.stdout
    assert not NATIVE_LOG.search(result.stderr), result.stderr[-2000:]


def test_verbose_shows_them_so_the_check_above_can_fail():
    result = _python("import tfspec", TFSPEC_VERBOSE="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert NATIVE_LOG.search(result.stderr), result.stderr[-2000:]


@pytest.mark.parametrize("module", ["bench.speedup", "evals.report"])
def test_entry_points_are_quiet_too(module):
    # bench.* import tfspec (and so TensorFlow) before parsing flags; evals.report never does.
    result = _python(None, "-m", module, "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage:"), result.stderr[-2000:]
    assert result.stderr == ""


def test_only_the_loops_retracing_warning_is_dropped(caplog):
    import logging  # pylint: disable=import-outside-toplevel
    import tfspec  # noqa: F401  pylint: disable=import-outside-toplevel  (installs the filter)
    import bench.component_loops  # noqa: F401  pylint: disable=import-outside-toplevel
    logger = logging.getLogger("tensorflow")
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        logger.warning("5 out of the last 9 calls to <function _loop_body.<locals>.run at 0x1> "
                       "triggered tf.function retracing. Tracing is expensive")
        logger.warning("5 out of the last 9 calls to <function Programs.prepare.<locals>."
                       "<lambda>.<locals>.<lambda> at 0x1> triggered tf.function retracing.")
        logger.warning("5 out of the last 9 calls to <function user_fn at 0x1> triggered "
                       "tf.function retracing. Tracing is expensive")
    assert [r.getMessage().split(" at ")[0] for r in caplog.records] == [
        "5 out of the last 9 calls to <function user_fn"]
