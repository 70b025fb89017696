"""bench.cycles: the sample categories, the perf report parser, and a real perf run."""

import math
import os

import pytest

from bench import cycles
from bench import models as bench_models
from tests.bench.bench_fixtures import (TINY, TINY_DRAFT, assert_fails_in_one_line,
                                         assert_usage_error)

KERNEL = "rows_matmul-7c5b3c734d5895ed.so"


@pytest.mark.parametrize("dso, symbol, category", [
    (KERNEL, "(anonymous namespace)::PanelsAvx512<5, 4, unsigned short>", "products, 2+ rows"),
    (KERNEL, "(anonymous namespace)::PanelsAvx512<12, 2, float>", "products, 2+ rows"),
    (KERNEL, "(anonymous namespace)::PanelAvx2<2, unsigned short>", "products, 2+ rows"),
    (KERNEL, "(anonymous namespace)::PanelsAvx512<1, 4, unsigned short>", "products, 1 row"),
    (KERNEL, "(anonymous namespace)::PanelAvx2<1, float>", "products, 1 row"),
    (KERNEL, "(anonymous namespace)::HashRangeAvx512", "panel fingerprint"),
    (KERNEL, "(anonymous namespace)::DenseAvx512<5>", "decode attention"),
    (KERNEL, "(anonymous namespace)::AmxBlock", "encoder products"),
    (KERNEL, "std::thread::_State_impl<std::thread::_Invoker<(anonymous namespace)::Pool>>",
     "helper waiting"),
    ("libtensorflow_cc.so.2", "ynn::dot_fp32_5x64x1_1x16x1_avx512f", "encoder products"),
    ("libtensorflow_cc.so.2", "ynn::transpose_x2048_avx", "encoder products"),
    ("libtensorflow_cc.so.2", "xla::cpu::ThunkExecutor::Execute<>", "XLA runtime"),
    ("libtensorflow_framework.so.2", "Eigen::ThreadPoolTempl<>::WorkerLoop", "XLA runtime"),
    ("[JIT] tid 29036", "0x00007f382819c1a1", "XLA fused code"),
    ("[kernel.kallsyms]", "__schedule", "OS"),
    ("libc.so.6", "__sched_yield", "OS"),
    ("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault", "Python"),
    ("libc.so.6", "_int_malloc", "other"),
])
def test_samples_fall_into_their_category(dso, symbol, category):
    assert cycles.categorize(dso, symbol) == category


REPORT = """\
# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 104K of event 'cpu-clock:ppp'
#
     53416  libtensorflow_cc.so.2        [.] ynn::dot_fp32_5x64x1_1x16x1_avx512f
      9999  rows_matmul-7c5b.so          [.] (anonymous namespace)::PanelsAvx512<5, 4, unsigned short>
       126  [JIT] tid 29036              [.] 0x00007f382819c1a1
        98  [JIT] tid 29036              [.] 0x00007f3828117247
        12  [kernel.kallsyms]            [k] __schedule
         3  libc.so.6                    [.] __memmove_avx512_unaligned_erms

"""


def test_a_perf_report_sums_into_categories():
    counts = cycles.samples_by_category(REPORT)
    assert set(counts) == set(cycles.CATEGORY_NAMES)
    assert counts["encoder products"] == 53416
    assert counts["products, 2+ rows"] == 9999
    assert counts["XLA fused code"] == 126 + 98  # one shared object name with spaces
    assert counts["OS"] == 12 and counts["other"] == 3
    assert sum(counts.values()) == 53416 + 9999 + 126 + 98 + 12 + 3


def test_a_real_perf_run_accounts_for_every_mode():
    target = bench_models.load(TINY)
    draft = bench_models.load(TINY_DRAFT, seed=1)
    pool = bench_models.prompts(TINY, target, num_prompts=2, prompt_length=5)
    records = cycles.run(target, draft, pool, [0, 2], max_new_tokens=6, seconds=1.0,
                         alternations=2)
    assert {r["temperature"] for r in records} == {0.0}
    assert len(records) == 2 * len(cycles.CATEGORY_NAMES)
    for k in (0, 2):
        mode = [r for r in records if r["k"] == k]
        assert [r["category"] for r in mode] == list(cycles.CATEGORY_NAMES)
        assert math.isclose(sum(r["share"] for r in mode), 1.0)
        assert sum(r["samples"] for r in mode) > 0
        first = mode[0]
        assert first["passes"] >= 2 and first["wall_ms_per_pass"] > 0  # one per turn, or more
        assert first["tokens_per_pass"] > 0 and first["rounds_per_pass"] >= 1
        # The CPU time of every category adds up to the samples over the rate.
        assert math.isclose(sum(r["cpu_ms_per_pass"] for r in mode) * first["passes"],
                            1e3 * sum(r["samples"] for r in mode) / 999)
    # An autoregressive loop runs no product of more than one row.
    ar_verify = [r for r in records if r["k"] == 0 and r["category"] == "products, 2+ rows"]
    assert ar_verify[0]["samples"] == 0


def test_a_missing_perf_fails_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SystemExit) as exit_info:
        cycles.main(["--k=0", f"--target={TINY}"])
    assert "perf not found on PATH" in str(exit_info.value)
    assert "\n" not in str(exit_info.value)


@pytest.mark.parametrize("flag", ["--k=-1", "--k=four", "--seconds=0", "--frequency=0",
                                  "--batch_size=0", "--alternations=0", "--temperature=-1"])
def test_bad_flags_fail_in_one_line(flag, capsys):
    assert_usage_error(cycles.main, flag, capsys=capsys)


def test_the_command_exits_2_without_a_traceback():
    assert_fails_in_one_line("bench.cycles", "--k=-1")


def test_a_perf_that_cannot_record_fails_with_its_reason(monkeypatch, tmp_path):
    # A stand-in perf that refuses to record, as perf does where perf_event_paranoid forbids.
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'Error: No permission to enable cpu-clock event.' >&2\n"
                    "exit 255\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    calls = []
    with pytest.raises(cycles.PerfError, match="perf record failed: Error: No permission"):
        cycles.record(lambda: calls.append(1), seconds=1.0, frequency=99)
    assert not calls  # nothing ran unsampled


def test_a_batch_pass_decodes_the_pool_in_batches():
    target = bench_models.load(TINY)
    pool = bench_models.prompts(TINY, target, num_prompts=3, prompt_length=4)
    records = cycles.run(target, None, pool, [0], max_new_tokens=5, seconds=0.5,
                         alternations=1, batch_size=2)
    assert {r["batch_size"] for r in records} == {2}
    # Two calls of two rows (the last one filled by cycling): four rows of up to 5 tokens,
    # and each call's loop runs until its longest row is done.
    first = records[0]
    assert 4 <= first["tokens_per_pass"] <= 4 * 5
    assert 2 <= first["rounds_per_pass"] <= 2 * 5


def test_work_that_fails_under_perf_leaves_no_perf_running():
    def failing_work():
        raise RuntimeError("decode failed")

    before = _perf_children()
    with pytest.raises(RuntimeError, match="decode failed"):
        cycles.record(failing_work, seconds=1.0, frequency=99)
    assert _perf_children() == before


def _perf_children():
    """pids of perf processes whose parent is this process."""
    children = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            parent = int(fields[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if name == "perf" and parent == os.getpid():
            children.add(int(pid))
    return children
