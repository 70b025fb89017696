"""What skipping dead window entries saves: decoding with and without `live_width`.

The loop passes a model that takes it (`LiveWidth` in tfspec/models/protocol.py: T5 on CPU,
through `tfspec.kernels`) each row's live entries per call: 0 for a row that has finished
(or, in a draft step, stopped drafting), 1 + m_b in an adaptive round where the row drafted
m_b < k, the whole window otherwise. The products then skip the rest. This times each mode
twice, interleaved in one process: the models as they are, and wrapped so that they do not
declare `decodes_live_width` (the loop then computes every entry, as before the feature).
Both decode the same tokens (asserted: the skipped entries are never read).

For each (mode, temperature), one record:

    mode                 "<k>@<batch size>" (k = 0: autoregressive; "auto": adaptive draft
                         length without the autoregressive fallback, so it speculates)
    ms_per_token         with live widths (as shipped)
    whole_ms_per_token   every entry computed
    speedup              whole_ms_per_token / ms_per_token
    same_tokens          both decoded the same tokens (greedy: always; sampled: same seeds)

Batches are consecutive prompts of the pool (the last one filled by cycling); at batch > 1
rows finish at different rounds, and every round after a row's EOS used to multiply its
entries anyway.

    python -m bench.live_width --modes 0@8,4@8,auto@1,4@1 --temperatures 0,1 \\
        --json bench/results/live_width.json
"""

import argparse
from typing import List, Optional, Sequence, Tuple

import numpy as np

import tfspec
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from tfspec.testing.wrapped_model import WrappedModel

COLUMNS = ["mode", "temperature", "ms_per_token", "whole_ms_per_token", "speedup",
           "same_tokens", "tokens"]


class WholeWindows(WrappedModel):
    """A model that hides `decodes_live_width`: the loop computes every entry of its windows.

    Everything else is the wrapped model's.
    """

    decodes_live_width = False

    def decode(self, context, cache, ids, positions):
        return self._model.decode(context, cache, ids, positions)


def parse_modes(text: str) -> List[Tuple[object, int]]:
    """"0@8,4@8,auto@1" -> [(0, 8), (4, 8), ("auto", 1)].

    Raises:
      argparse.ArgumentTypeError: an entry that is not <k>@<batch size> with k >= 0 or
        "auto" and a batch size >= 1.
    """
    modes = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        k_text, _, batch_text = item.partition("@")
        try:
            k = "auto" if k_text == "auto" else int(k_text)
            batch = int(batch_text)
        except ValueError:
            k, batch = -1, 0
        if (k != "auto" and k < 0) or batch < 1:
            raise argparse.ArgumentTypeError(f"entry {item!r} is not <k>@<batch size> (k >= 0 or "
                             f"auto, batch size >= 1), e.g. 4@8")
        modes.append((k, batch))
    if not modes:
        raise argparse.ArgumentTypeError("no entry; give e.g. 0@8,4@8,auto@1")
    return modes


def parse_temperatures(text: str) -> List[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(not np.isfinite(t) or t < 0 for t in values):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         f"temperatures >= 0, e.g. 0,1")
    return values


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.live_width", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.add_argument("--modes", type=parse_modes, default=parse_modes("0@8,4@8,auto@1,4@1"),
                        help="comma-separated <k>@<batch size> (k = 0: autoregressive; "
                             "auto: adaptive draft length, without the fallback)")
    parser.add_argument("--temperatures", type=parse_temperatures, default=[0.0, 1.0],
                        help="comma-separated sampling temperatures (0: greedy)")
    return parser.parse_args(argv)


def run(target, draft, prompt_pool: Sequence[Sequence[int]], modes, temperatures,
        max_new_tokens: int = 64, repeats: int = 3, seed: int = 0,
        jit_compile: Optional[bool] = True) -> List[dict]:
    """One record per (mode, temperature) (see the module docstring)."""
    whole_target = WholeWindows(target)
    whole_draft = WholeWindows(draft) if draft is not None else None
    records = []
    for temperature in temperatures:
        sampling = tfspec.Sampling(temperature=temperature)
        for k, batch_size in modes:
            batches = bench_models.batches_of(list(prompt_pool), batch_size)
            k_arg = (tfspec.AutoDraft(fallback=False) if k == "auto" else k)

            def decode(t, d, batches=batches, k_arg=k_arg):
                return [tfspec.generate(t, b, draft=d if k_arg != 0 else None, k=k_arg,
                                        max_new_tokens=max_new_tokens, sampling=sampling,
                                        seed=seed + i, jit_compile=jit_compile)
                        for i, b in enumerate(batches)]

            (live_s, whole_s), (live, whole) = timing.interleaved_runs(
                [lambda: decode(target, draft), lambda: decode(whole_target, whole_draft)],
                repeats)
            tokens = int(sum(g.lengths.sum() for g in live))
            same = all(np.array_equal(a.tokens, b.tokens) for a, b in zip(live, whole))
            records.append({
                "mode": f"{k}@{batch_size}", "k": k, "batch_size": batch_size,
                "temperature": temperature, "tokens": tokens,
                "ms_per_token": 1e3 * live_s / tokens,
                "whole_ms_per_token": 1e3 * whole_s / int(sum(g.lengths.sum() for g in whole)),
                "same_tokens": bool(same)})
            records[-1]["speedup"] = (records[-1]["whole_ms_per_token"]
                                      / records[-1]["ms_per_token"])
    return records


def main(argv=None):
    args = _parse_args(argv)
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(
            args, max(b for _, b in args.modes))
    records = run(target, draft, pool, args.modes, args.temperatures, args.max_new_tokens,
                  args.repeats, args.seed, speedup_lib.jit_compile(args))
    speedup_lib.print_and_write(args, records, COLUMNS)


if __name__ == "__main__":
    main()
