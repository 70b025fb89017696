"""The report's "Draft kinds" section, from `python -m bench.draft_kinds --json FILE` results.

`bench.draft_kinds` times every kind of draft (a T5 draft, a feature draft, Medusa heads,
NGram, PromptLookup) against one target in one interleaved run per file, and writes for each
kind and temperature its best k with the speed-up, beta and c there (the JSON's `summary`).
A report reads one file per temperature (or one file with both) and lays the kinds side by
side: one row per kind, one column group per temperature.

Reading these files needs neither TensorFlow nor `bench`: they are plain JSON, and a file
that is not a draft-kinds result is refused with a one-line `ReportError`.
"""

import json
import os
from typing import Any, Dict, List, Sequence, Tuple

from evals.report.analysis import DASH
from evals.report.runs import ReportError
from evals.report.tables import fmt, markdown_table


def load_draft_kinds(path: str) -> Dict[str, Any]:
    """Reads one `bench.draft_kinds` JSON; raises ReportError (one line) if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except OSError as e:
        raise ReportError(f"cannot read draft-kinds results {path}: {e.strerror}") from None
    except ValueError:
        raise ReportError(f"{path} is not JSON; pass the file written by "
                          "`python -m bench.draft_kinds --json FILE`") from None
    if (not isinstance(result, dict) or result.get("benchmark") != "draft_kinds"
            or not isinstance(result.get("summary"), list)):
        raise ReportError(f"{path} is not a bench.draft_kinds result (no benchmark: "
                          "draft_kinds and summary); pass the file written by "
                          "`python -m bench.draft_kinds --json FILE`")
    result["path"] = path
    return result


def _greedy_identity(entries: Sequence[Dict[str, Any]]) -> str:
    """'yes' / 'NO' over the greedy entries that were checked, or a dash if none was."""
    checked = [e.get("identical_to_ar") for e in entries
               if float(e.get("temperature") or 0.0) == 0.0
               and e.get("identical_to_ar") is not None]
    if not checked:
        return DASH
    return "yes" if all(checked) else "NO"


def draft_kinds_table(results: Sequence[Dict[str, Any]]) -> str:
    """One row per (kind, draft); per temperature: best k, speed-up, beta and c there.

    Args:
      results: loaded `bench.draft_kinds` results (`load_draft_kinds`). A kind measured at
        the same temperature in two files keeps the later file's entry.

    Returns:
      A Markdown table. At T > 0 "length-matched" is the speed-up at one request length
      (`bench.speedup.matched_speedup`; the best k is chosen by it), a dash in results that
      predate it. "c" is per loop step over whole requests; "c per step" leaves out
      each request's fixed part (encoders, call), a dash in results that predate it.
      "greedy = AR" says whether the greedy tokens of every k were identical to
      autoregressive decoding.
    """
    temperatures: List[float] = []
    rows: Dict[Tuple[str, str], Dict[float, Dict[str, Any]]] = {}
    for result in results:
        for entry in result["summary"]:
            temperature = float(entry.get("temperature") or 0.0)
            if temperature not in temperatures:
                temperatures.append(temperature)
            key = (str(entry.get("kind")), str(entry.get("draft")))
            rows.setdefault(key, {})[temperature] = entry
    temperatures.sort()
    header = ["kind", "draft"]
    for t in temperatures:
        label = f"T={t:g}"
        header += [f"{label} best k", f"{label} speed-up", f"{label} beta", f"{label} c",
                   f"{label} c per step"]
        if t > 0:
            header.insert(len(header) - 3, f"{label} length-matched")
    header.append("greedy = AR")
    body = []
    for (kind, draft), by_temperature in rows.items():
        cells = [kind, f"`{draft}`"]
        for t in temperatures:
            entry = by_temperature.get(t)
            if entry is None:
                cells += [DASH] * (6 if t > 0 else 5)
                continue
            cells += [str(entry.get("best_k", DASH)), fmt(entry.get("speedup"), 2, "x")]
            if t > 0:
                cells.append(fmt(entry.get("matched_speedup"), 2, "x"))
            cells += [fmt(entry.get("beta_mean"), 3), fmt(entry.get("draft_cost_ratio"), 2),
                      fmt(entry.get("step_cost_ratio"), 2)]
        cells.append(_greedy_identity(list(by_temperature.values())))
        body.append(cells)
    return markdown_table(header, body)


def draft_kinds_section(results: Sequence[Dict[str, Any]]) -> List[str]:
    """The report lines of the section: what was measured, from which files, the table."""
    if not results:
        return []
    first = results[0]
    sources = ", ".join(f"`{os.path.relpath(r['path'])}`" for r in results)
    ks = sorted({k for r in results for k in (r.get("k") or [])},
                key=lambda k: (isinstance(k, str), k if isinstance(k, int) else 0, str(k)))
    frozen = {r.get("weights_frozen") for r in results}
    # Files from before the flag existed timed calls that checked the weights.
    weights = ("models frozen (`tfspec.freeze_weights`: no per-request check of the "
               "weights)" if frozen == {True} else
               "weights checked on every request" if frozen <= {False, None} else
               "some files with frozen models, some without")
    return [
        "## Draft kinds side by side",
        "",
        f"From `python -m bench.draft_kinds` ({sources}): target "
        f"`{first.get('target')}`, {first.get('num_prompts')} held-out prompts, batch "
        f"{first.get('batch_size')}, {first.get('max_new_tokens')} new tokens, k in "
        f"{{{', '.join(str(k) for k in ks)}}}, {weights}, one interleaved run per file. "
        "Each cell is "
        "the kind's best k at that temperature; speed-up is autoregressive ms/token over "
        "speculative ms/token in the same run, beta the measured overlap, c the cost of "
        "one draft step over one target step, over whole requests (a feature draft or "
        "Medusa heads decode alone behind the target's encoder, which c charges to their "
        "steps), and c per step the same with each request's fixed part split off. At "
        "T > 0 the modes sample answers of other lengths, which moves ms/token through "
        "each request's fixed part: length-matched compares them at one request length, "
        "and picks the best k there.",
        "",
        draft_kinds_table(results),
        "",
    ]
