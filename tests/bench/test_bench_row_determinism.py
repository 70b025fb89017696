"""bench.row_determinism on tiny random models."""

import json

import pytest

from bench import row_determinism
from tests.bench.bench_fixtures import TINY, TINY_DRAFT


def test_rows_do_not_depend_on_their_companions(tmp_path, capsys):
    temperature = 1.0  # Sampled: where a rounding difference could flip a token.
    out = tmp_path / "rows.json"
    row_determinism.main(["--target", TINY, "--draft", TINY_DRAFT, "--num_prompts", "6",
                          "--prompt_length", "5", "--max_new_tokens", "6", "--k", "2",
                          "--batch_sizes", "1,4", "--fixed_batch", "3",
                          "--temperature", str(temperature), "--json", str(out)])
    assert "companions shuffled" in capsys.readouterr().out
    result = json.loads(out.read_text())
    by_key = {(r["mode"], r["comparison"]): r for r in result["records"]}
    assert set(by_key) == {(m, c) for m in ("autoregressive", "speculative")
                           for c in ("batch 4 vs 1", "companions shuffled, one shape")}
    for (mode, comparison), record in by_key.items():
        assert record["rows"] == 6
        assert len(record["first_differing_rows"]) == min(10, record["rows_differing"])
        if comparison.startswith("companions"):
            # The promise of tfspec.generate: at one call shape, other rows change nothing.
            assert record["rows_differing"] == 0, mode
    assert result["num_prompts"] == 6 and result["temperature"] == temperature


def test_bad_batch_sizes_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        row_determinism.main(["--batch_sizes", "1,x"])
    assert exit_info.value.code == 2
    assert "--batch_sizes" in capsys.readouterr().err
