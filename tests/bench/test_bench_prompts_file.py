"""--prompts FILE in bench.speedup, bench.batch and bench.loop_overhead (and bench.models)."""

import os
import subprocess
import sys
import types

import pytest

import tfspec
from bench import batch
from bench import loop_overhead
from bench import models as bench_models
from bench import speedup
from tests.bench.bench_fixtures import (PROMPT_TEXTS, TINY, TINY_DRAFT, TINY_PRESET_8192,
                                        ZOO_TARGET, write_prompts)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = ["--max_new_tokens", "2", "--repeats", "1", "--eager"]


@pytest.fixture(scope="module")
def tokenizer():
    return tfspec.load_tokenizer(ZOO_TARGET)


@pytest.fixture
def generate_calls(monkeypatch):
    """The (model, prompts) of every tfspec.generate call; the real one still runs."""
    calls = []
    real = tfspec.generate

    def spy(model, prompts, **kwargs):
        calls.append((model, [list(p) for p in prompts]))
        return real(model, prompts, **kwargs)

    monkeypatch.setattr(tfspec, "generate", spy)
    return calls


def _target_prompts(calls):
    """The prompt lists of the calls on the first model called (the target, run first)."""
    target = calls[0][0]
    return [prompts for model, prompts in calls if model is target]


def test_prompts_from_file_encodes_cuts_and_takes_the_first_n(tmp_path, tokenizer):
    path = write_prompts(tmp_path / "p.jsonl", extra_lines=["", '{"prompt": "x = 1", "id": 7}'])
    encoded = [tokenizer.encode(t) for t in PROMPT_TEXTS]
    assert bench_models.prompts_from_file(path, tokenizer) == \
        encoded + [tokenizer.encode("x = 1")]  # The blank line is skipped, extra keys ignored.
    assert bench_models.prompts_from_file(path, tokenizer, limit=3, num_prompts=2) == \
        [ids[-3:] for ids in encoded[:2]]  # Keep the end, as the built-in pool.
    # bench.models.prompts: the target's tokenizer and max_prompt_length, any target spec.
    spm = tfspec.tokenizer.zoo_tokenizer_path("tiny-code")
    target = types.SimpleNamespace(tokenizer_path=spm, max_prompt_length=4, vocab_size=8192)
    assert bench_models.prompts("some/checkpoint", target, None, prompts_file=path)[:3] == \
        [ids[-4:] for ids in encoded]


def test_speedup_decodes_the_file_prompts(tmp_path, tokenizer, generate_calls):
    path = write_prompts(tmp_path / "p.jsonl")
    speedup.main(["--target", ZOO_TARGET, "--draft", "ngram:unigram", "--k", "1",
                  "--batch_size", "3", "--prompts", path, *FAST])
    expected = [tokenizer.encode(t) for t in PROMPT_TEXTS]
    assert _target_prompts(generate_calls)
    assert all(prompts == expected for prompts in _target_prompts(generate_calls))


def test_batch_takes_the_first_num_prompts_of_the_file(tmp_path, tokenizer, generate_calls):
    path = write_prompts(tmp_path / "p.jsonl")
    batch.main(["--target", ZOO_TARGET, "--draft", "ngram:unigram", "--k", "1",
                "--batch_sizes", "3", "--num_prompts", "2", "--prompts", path, *FAST])
    first, second = (tokenizer.encode(t) for t in PROMPT_TEXTS[:2])
    # Two prompts, cycled to fill the batch of 3 (the pool is not topped up to the batch).
    assert all(prompts == [first, second, first]
               for prompts in _target_prompts(generate_calls))


def test_loop_overhead_decodes_the_file_prompts_one_at_a_time(tmp_path, tokenizer,
                                                              generate_calls, capsys):
    path = write_prompts(tmp_path / "p.jsonl")
    loop_overhead.main(["--preset", TINY_PRESET_8192, "--k", "1", "--prompts", path, *FAST])
    assert "round_over_step" in capsys.readouterr().out
    expected = [[tokenizer.encode(t)] for t in PROMPT_TEXTS]
    # Warm-up and timed call, autoregressive then speculative: each covers the 3 prompts.
    assert _target_prompts(generate_calls) == expected * 4


BAD_FILES = {
    # name: (file lines or None for a missing file, line number named in the message or None)
    "missing": (None, None),
    "empty": (["", "  "], None),
    "not_json": (['{"prompt": "ok"}', "{prompt: oops}"], 2),
    "no_prompt_key": (['{"text": "def f():"}'], 1),
    "prompt_not_a_string": (['{"prompt": "ok"}', '{"prompt": ["a"]}'], 2),
    "empty_prompt": (['{"prompt": "ok"}', '{"prompt": "ok"}', '{"prompt": ""}'], 3),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_prompts_file_exits_2_with_one_line(case, tmp_path, capsys):
    lines, line_number = BAD_FILES[case]
    path = str(tmp_path / f"{case}.jsonl")
    if lines is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    with pytest.raises(SystemExit) as exit_info:
        speedup.main(["--target", ZOO_TARGET, "--draft", "ngram:unigram", "--k", "1",
                      "--prompts", path, *FAST])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and path in err, err
    if line_number is not None:
        assert f"line {line_number}" in err, err
    assert "prompt" in err  # Says what a line must hold (or what to do with it).


def test_prompts_file_needs_a_fitting_tokenizer(tmp_path, capsys):
    path = write_prompts(tmp_path / "p.jsonl")
    with pytest.raises(SystemExit) as exit_info:  # A random target has no tokenizer.
        batch.main(["--target", TINY, "--draft", TINY_DRAFT, "--prompts", path, *FAST])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has none" in err, err
    with pytest.raises(SystemExit) as exit_info:  # 8192 tokenizer ids, 64-id target.
        loop_overhead.main(["--preset", "t5-small:vocab_size=64", "--prompts", path, *FAST])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "vocab_size 8192" in err and "64" in err, err


def test_bad_line_from_the_command_line_has_no_traceback(tmp_path):
    path = str(tmp_path / "bad.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"prompt": "ok"}\nnot json\n')
    proc = subprocess.run([sys.executable, "-m", "bench.loop_overhead", "--prompts", path],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and f"{path} line 2 is not JSON" in error_lines[0], proc.stderr
