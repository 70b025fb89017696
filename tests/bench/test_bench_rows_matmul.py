"""bench.rows_matmul on a tiny random pair: structure and identities (no speed asserts)."""

import json

import pytest

from bench import rows_matmul
from tfspec import kernels

pytestmark = pytest.mark.skipif(not kernels.usable_outside_trace(),
                                reason=f"needs the kernel: {kernels.status()}")

TINY = ("random:t5-small:d_model=32,d_kv=8,num_heads=2,d_ff=48,vocab_size=40,num_layers=1,"
        "num_decoder_layers=1")


def test_products_and_end_to_end_records(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert rows_matmul.main(["--target", TINY, "--draft", TINY, "--rows", "1,5", "--repeats", "1",
                             "--products", "ffn out,lm head", "--short", "2", "--long", "4",
                             "--windows", "1,5", "--window_prompt_length", "6",
                             "--json", str(path)]) == 0
    payload = json.loads(path.read_text())
    records = payload["records"]
    assert [(r["product"], r["rows"]) for r in records] == [
        (name, rows) for name in ("ffn out", "lm head") for rows in (1, 5)]
    for r in records:
        assert r["kernel/xla"] == pytest.approx(r["kernel_us"] / r["xla_us"])
        if r["rows"] == 1:
            assert r["xla_vs_row1"] == pytest.approx(1.0)
            assert r["kernel_vs_row1"] == pytest.approx(1.0)
    e2e = payload["end_to_end"]
    spin = kernels.DEFAULT_HELPER_SPIN_US
    assert [(r["mode"], r["kernel"], r["half_width"], r["helper_spin_us"]) for r in e2e] == [
        ("autoregressive", False, None, None), ("speculative", False, None, None),
        ("autoregressive", True, False, spin), ("speculative", True, False, spin),
        ("autoregressive", True, True, spin), ("speculative", True, True, spin)]
    assert e2e[0]["speedup_vs_xla_ar"] == pytest.approx(1.0)
    windows = payload["decode_windows"]
    assert [w["window"] for w in windows] == [1, 5]
    for w in windows:  # A tiny model's times are noise: check the arithmetic, not speed.
        if w["xla_ms"] > 0:
            assert w["kernel/xla"] == pytest.approx(w["kernel_ms"] / w["xla_ms"])
    for key, ms in (("xla_vs_window1", "xla_ms"), ("kernel_vs_window1", "kernel_ms")):
        if windows[0][ms] > 0:
            assert windows[0][key] == pytest.approx(1.0)
    assert "rows_matmul kernel: on" in capsys.readouterr().out


def test_unknown_product_is_a_usage_error(capsys):
    assert rows_matmul.main(["--target", TINY, "--products", "nope"]) == 2
    assert "unknown --products ['nope']" in capsys.readouterr().err
