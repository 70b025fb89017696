"""Where a compiled decoding loop's time goes, op by op, from an XLA:CPU profile.

`bench.round_breakdown` times each part of a round in a loop of its own; this looks inside
the real loop instead. It decodes the first prompts of the pool with `tfspec.generate`
(autoregressive at --k 0, speculative otherwise), warms up, then records --calls calls
under TensorFlow's profiler with XLA:CPU's per-op trace events on
(`--xla_cpu_enable_xprof_traceme`, set by this module before TensorFlow starts). Every
event of the XLA executor threads is an HLO instruction of the compiled program; the
optimized HLO of the same loop (`experimental_get_compiler_ir`) gives each its shape, its
custom-call target and its TensorFlow op name. Records, one per instruction, worst first:

    op             HLO instruction name
    category       kernel product (tfspec.kernels) | dot (XLA's) | reduce-window (XLA's
                   cumsum and softmax splits) | fusion / other
    phase          draft steps (the draft block's nested while loop) | round (the rest of
                   the loop body: verify, acceptance, commit; a step at --k 0) | per call
                   (outside the loop: the encoders and the cross-attention keys/values)
    per_call       executions per generate call
    mean_us        mean duration of one execution
    ms_per_call    total per generate call
    ms_per_round   ms_per_call / loop iterations, for the loop's phases (nan per call)
    shape, target, tf_op   from the HLO

and per (phase, category) the same sums. The profiler adds ~0.3 ms per iteration here
(measured: a profiled call against an unprofiled one), so compare ops with each other, and
runs with each other, not with `bench.speedup`'s ms/token.

--adaptive profiles the adaptive loop of `k="auto"` drafting exactly like fixed --k
(`bench.auto_overhead.forced_auto`: every row's horizon stays k, no fallback), so that a
profile beside the fixed loop's shows what the adaptive machinery adds op by op.

    python -m bench.loop_profile --k 4 --temperature 1
    python -m bench.loop_profile --k 4 --temperature 1 --adaptive
    python -m bench.loop_profile --k 0 --top 15 --json runs/bench/profile_ar.json
"""

import os

# XLA:CPU reads its flags when it compiles the first program: before TensorFlow is used.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_enable_xprof_traceme=true").strip()

import collections  # pylint: disable=g-import-not-at-top,wrong-import-position
import glob
import re
import tempfile
from typing import Dict, List

import numpy as np

import tfspec  # First: keeps TensorFlow's native logs quiet (tfspec.quiet).
import tensorflow as tf  # pylint: disable=g-bad-import-order
from bench import auto_overhead
from bench import models as bench_models
from bench import speedup as speedup_lib
from bench import timing
from evals import cli
from tfspec import generation

COLUMNS = ["op", "category", "phase", "per_call", "mean_us", "ms_per_call", "ms_per_round",
           "shape", "target", "tf_op"]
CATEGORY_COLUMNS = ["phase", "category", "ops", "ms_per_call", "ms_per_round"]
PHASES = ("draft steps", "round", "per call")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\S+) (.*)$")


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_CALLED = re.compile(
    r"(?:body|condition|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")  # a conditional's N branches


def parse_hlo(text: str) -> Dict[str, dict]:
    """{instruction name: {"shape", "target", "tf_op", "phase"}} of optimized HLO text.

    The phase comes from where the instruction lives: in the body of the while named
    "while/while" (the draft block's loop, nested in the decoding loop) or a computation it
    calls: "draft steps"; in the body of the while named "while" (the decoding loop): "round";
    anywhere else: "per call". (Ops that XLA created lack TensorFlow names, so the names
    alone cannot tell.)
    """
    computations: Dict[str, List[str]] = {}
    current = None
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m and not line.startswith(" "):
            current = computations.setdefault(m.group(1), [])
        elif current is not None and line.startswith(" "):
            current.append(line)
    loop_bodies = {}  # "while" / "while/while" -> the body computation
    for lines in computations.values():
        for line in lines:
            if " while(" in line:
                name = re.search(r'op_name="([^"]*)"', line)
                body = re.search(r"body=%?([\w.\-]+)", line)
                if name and body and name.group(1) in ("while", "while/while"):
                    loop_bodies[name.group(1)] = body.group(1)

    def reachable(root):
        seen, stack = set(), [root] if root else []
        while stack:
            comp = stack.pop()
            if comp in seen or comp not in computations:
                continue
            seen.add(comp)
            for line in computations[comp]:
                stack.extend(_CALLED.findall(line))
                for branches in _BRANCHES.findall(line):
                    stack.extend(b.strip().lstrip("%") for b in branches.split(","))
        return seen

    draft = reachable(loop_bodies.get("while/while"))
    round_ = reachable(loop_bodies.get("while")) - draft
    out = {}
    for comp, lines in computations.items():
        phase = "draft steps" if comp in draft else "round" if comp in round_ else "per call"
        for line in lines:
            m = _INSTRUCTION.match(line)
            if not m:
                continue
            rest = m.group(3)
            target = re.search(r'custom_call_target="([^"]*)"', rest)
            op_name = re.search(r'op_name="([^"]*)"', rest)
            out[m.group(1)] = {"shape": m.group(2),
                               "target": target.group(1) if target else "",
                               "tf_op": op_name.group(1) if op_name else "", "phase": phase}
    return out


def category(name: str, target: str) -> str:
    if target.startswith("tfspec_rows_matmul"):
        return "kernel product"
    if name.startswith("dot"):
        return "dot"
    if "reduce-window" in name:
        return "reduce-window"
    return "fusion / other"


def executor_events(xspace_bytes: bytes) -> Dict[str, List[float]]:
    """{event name: durations in us} of the XLA executor threads of an XSpace profile."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
    space = xplane_pb2.XSpace()
    space.ParseFromString(xspace_bytes)
    events = collections.defaultdict(list)
    for plane in space.planes:
        for line in plane.lines:
            if "Eigen" not in line.name:  # XLA:CPU runs a program's thunks on its pool
                continue
            for event in line.events:
                events[plane.event_metadata[event.metadata_id].name].append(
                    event.duration_ps / 1e6)
    return events


def summarize(events: Dict[str, List[float]], hlo: Dict[str, dict], calls: int,
              iterations: float) -> List[dict]:
    """One record per HLO instruction seen in `events` (see the module docstring)."""
    records = []
    for name, durations in events.items():
        info = hlo.get(name)
        if info is None:  # executor bookkeeping (ThunkExecutor, while), not an instruction
            continue
        if name.startswith("while"):
            continue  # a loop's own event spans its body's instructions
        total_ms = sum(durations) / 1e3 / calls
        in_loop = info["phase"] != "per call"
        records.append({"op": name, "category": category(name, info["target"]),
                        "phase": info["phase"],
                        "per_call": len(durations) / calls,
                        "mean_us": float(np.mean(durations)),
                        "ms_per_call": total_ms,
                        "ms_per_round": total_ms / iterations if in_loop else float("nan"),
                        "shape": info["shape"], "target": info["target"],
                        "tf_op": info["tf_op"][-60:]})
    records.sort(key=lambda r: -r["ms_per_call"])
    return records


def by_category(records: List[dict], iterations: float) -> List[dict]:
    """Sums of `records` per (phase, category), loop phases first, largest first."""
    totals = collections.defaultdict(lambda: [0, 0.0])
    for r in records:
        key = (r["phase"], r["category"])
        totals[key][0] += 1
        totals[key][1] += r["ms_per_call"]
    rows = [{"phase": p, "category": c, "ops": n, "ms_per_call": ms,
             "ms_per_round": ms / iterations if p != "per call" else float("nan")}
            for (p, c), (n, ms) in totals.items()]
    rows.sort(key=lambda r: (PHASES.index(r["phase"]), -r["ms_per_call"]))
    return rows


def profile(target, draft, prompts, k: int, sampling: tfspec.Sampling, max_new_tokens: int,
            calls: int, seed: int = 0, adaptive: bool = False) -> dict:
    """Profiles `calls` generate calls of one batch of `prompts` (EOS on, as served).

    adaptive: profile the adaptive loop forced to draft k every round (k >= 1).
    """
    if adaptive and k < 1:
        raise ValueError("adaptive profiles need k >= 1")
    kwargs = dict(draft=draft if k else None,
                  k=auto_overhead.forced_auto(k) if adaptive else k,
                  max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)
    gen = tfspec.generate(target, prompts, **kwargs)  # compiles; panels packed
    tfspec.generate(target, prompts, **kwargs)
    iterations = float(np.max(gen.stats.rounds))
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(calls):
                tfspec.generate(target, prompts, **kwargs)
        finally:
            tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        if not paths:
            raise RuntimeError("the profiler wrote no trace")
        with open(paths[0], "rb") as f:
            events = executor_events(f.read())
    # The same program's optimized HLO (instruction names match the executable's): the one
    # loop this process compiled for the target, on generate's own inputs.
    loops = generation.compiled_loops(target)
    if len(loops) != 1:
        raise RuntimeError(f"expected one compiled loop for the target, found {len(loops)}")
    ids, lengths = generation._prompt_array(prompts, None, target.pad_id)  # pylint: disable=protected-access
    inputs = [tf.constant(ids, tf.int32), tf.constant(lengths, tf.int32),
              tf.range(len(prompts), dtype=tf.int64)]
    if adaptive:  # The adaptive loop's extra input: every row's first horizon.
        inputs.append(tf.constant(np.full([len(prompts)], k, np.int32)))
    inputs.append(tf.constant(seed, tf.int64))
    # Which models' kernel panels to check (bool [2], `generation._loop_body`): a runtime
    # input, so its value does not change the program.
    inputs.append(tf.constant([True, True]))
    hlo = parse_hlo(loops[0].experimental_get_compiler_ir(*inputs)(stage="optimized_hlo"))
    records = summarize(events, hlo, calls, iterations)
    return {"iterations_per_call": iterations, "records": records,
            "categories": by_category(records, iterations)}


def _parse_args(argv=None):
    parser = cli.ArgumentParser("python -m bench.loop_profile", __doc__.split("\n")[0])
    speedup_lib.add_pair_args(parser)
    parser.set_defaults(num_prompts=1)
    parser.add_argument("--k", type=int, default=4, help="draft length (0: autoregressive)")
    parser.add_argument("--batch_size", type=int, default=1,
                        help="prompts decoded together (the pool's first ones)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--calls", type=int, default=3, help="profiled generate calls")
    cli.add_bool(parser, "adaptive", False,
                 'profile the adaptive loop of k="auto" forced to draft --k every round')
    parser.add_argument("--top", type=int, default=25,
                        help="instructions printed (0: only the per-category sums)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = _parse_args(argv)
    if args.k < 0 or args.calls < 1 or args.batch_size < 1 or args.top < 0:
        return cli.usage_error("python -m bench.loop_profile",
                               "--k and --top must be >= 0, --calls and --batch_size >= 1")
    if args.adaptive and args.k < 1:
        return cli.usage_error("python -m bench.loop_profile",
                               "--adaptive needs --k >= 1 (the horizon it is forced to)")
    with bench_models.exit_on_input_error():
        target, draft, pool = speedup_lib.load_pair_and_prompts(args,
                                                                min_prompts=args.batch_size)
    prompts = [pool[i % len(pool)] for i in range(args.batch_size)]
    sampling = tfspec.Sampling(temperature=args.temperature, top_k=args.top_k,
                               top_p=args.top_p)
    result = profile(target, draft, prompts, args.k, sampling, args.max_new_tokens,
                     args.calls, args.seed, args.adaptive)
    print(f"{result['iterations_per_call']:.0f} loop iterations per call; ms per iteration:")
    timing.print_table(result["categories"], CATEGORY_COLUMNS)
    print()
    if args.top > 0:
        timing.print_table(result["records"][:args.top], COLUMNS)
    timing.write_json(args.json, {"benchmark": "loop_profile", "target": args.target,
                                  "draft": args.draft, "k": args.k,
                                  "adaptive": args.adaptive,
                                  "batch_size": args.batch_size,
                                  "sampling": sampling.to_dict(), "calls": args.calls,
                                  **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
