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
    assert [(r["mode"], r["kernel"]) for r in e2e] == [
        ("autoregressive", False), ("speculative", False), ("autoregressive", True),
        ("speculative", True)]
    assert e2e[0]["speedup_vs_xla_ar"] == pytest.approx(1.0)
    assert "rows_matmul kernel: on" in capsys.readouterr().out


def test_unknown_product_is_a_usage_error(capsys):
    assert rows_matmul.main(["--target", TINY, "--products", "nope"]) == 2
    assert "unknown --products ['nope']" in capsys.readouterr().err
