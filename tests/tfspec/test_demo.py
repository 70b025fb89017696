"""The README's first command runs the demo: it must exit 0 (greedy identity holds)."""

from tfspec import demo


def test_demo_runs_and_checks_greedy_identity(capsys):
    assert demo.main(["--num_prompts", "2", "--max_new_tokens", "8", "--k", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("identical to autoregressive: True") == 2
