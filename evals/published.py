"""Published numbers of the two speculative decoding papers, for side-by-side reports.

Numbers only (no prose), transcribed from the papers' tables (the papers are cited in
docs/design.md section 1):

* Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding"
  (arXiv 2211.17192), Table 2: T5-XXL (11B) target, batch size 1, one TPU v4, against
  the T5X implementation. `alpha` is the paper's E(beta); `speedup` the walltime factor.
* Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling"
  (arXiv 2302.01318), Table 1: Chinchilla 70B target with a 4B draft, K = 4, batch size 1,
  16 TPU v4. ROUGE-2 is stored x100 (the paper prints fractions, e.g. 0.112 -> 11.2) to
  match `summary.json`; pass@1 is a percentage, as in `summary.json`.

`task` uses the names of `evals.tasks.TASKS`, so rows match our runs by task and sampling.
"""

import dataclasses
from typing import Optional, Tuple

LEVIATHAN_SOURCE = "Leviathan et al. 2022, Table 2"
CHEN_SOURCE = "Chen et al. 2023, Table 1"


@dataclasses.dataclass(frozen=True)
class LeviathanRow:
    """One row of Leviathan et al. Table 2."""

    task: str
    target: str
    draft: str
    temperature: float
    k: int
    alpha: float
    speedup: float
    source: str = LEVIATHAN_SOURCE


@dataclasses.dataclass(frozen=True)
class ChenRow:
    """One benchmark of Chen et al. Table 1 (the baseline and the speculative line)."""

    task: str
    method: str              # "greedy" or "nucleus"
    temperature: float
    top_p: float
    metric: str              # key in summary.json quality{}
    baseline_quality: float
    speculative_quality: float
    baseline_ms_per_token: float
    speculative_ms_per_token: float
    speedup: float
    k: int = 4
    target: str = "Chinchilla 70B"
    draft: str = "4B draft (Chen et al.)"
    source: str = CHEN_SOURCE


LEVIATHAN_TABLE2: Tuple[LeviathanRow, ...] = (
    LeviathanRow("wmt_ende", "T5-XXL (11B)", "T5-small (77M)", 0.0, 7, 0.75, 3.4),
    LeviathanRow("wmt_ende", "T5-XXL (11B)", "T5-small (77M)", 1.0, 7, 0.62, 2.6),
    LeviathanRow("wmt_ende", "T5-XXL (11B)", "T5-large (800M)", 0.0, 7, 0.82, 1.7),
    LeviathanRow("cnn_dailymail", "T5-XXL (11B)", "T5-small (77M)", 0.0, 5, 0.65, 3.1),
    LeviathanRow("cnn_dailymail", "T5-XXL (11B)", "T5-small (77M)", 1.0, 5, 0.53, 2.3),
)

CHEN_TABLE1: Tuple[ChenRow, ...] = (
    ChenRow("xsum", "nucleus", 1.0, 0.8, "rouge2", 11.2, 11.4, 14.1, 7.52, 1.92),
    ChenRow("xsum", "greedy", 0.0, 1.0, "rouge2", 15.7, 15.6, 14.1, 7.00, 2.01),
    ChenRow("humaneval", "nucleus", 0.8, 0.95, "pass@1", 45.1, 47.0, 14.1, 5.73, 2.46),
)


def _draft_size(draft: Optional[str]) -> str:
    name = (draft or "").lower()
    for size in ("small", "base", "large", "xl"):
        if f"-{size}" in name or f"_{size}" in name or name.endswith(size):
            return size
    return "small"


def match_leviathan(task: str, temperature: float,
                    draft: Optional[str] = None) -> Optional[LeviathanRow]:
    """The Table 2 row of the same task and temperature (0 or 1), for the draft's size.

    A draft spec naming "large" matches the T5-large row where there is one; anything else
    matches the T5-small row (the paper's best draft).
    """
    rows = [r for r in LEVIATHAN_TABLE2
            if r.task == task and abs(r.temperature - float(temperature)) < 1e-9]
    if not rows:
        return None
    size = _draft_size(draft)
    for row in rows:
        if size in row.draft.lower():
            return row
    return next((r for r in rows if "small" in r.draft.lower()), rows[0])


def sampling_method(temperature: float, top_p: float = 1.0, top_k: int = 0) -> str:
    """"greedy", "nucleus", "top-k" or "sampling" (plain temperature sampling)."""
    if float(temperature) == 0.0:
        return "greedy"
    if top_p is not None and float(top_p) < 1.0:
        return "nucleus"
    if top_k:
        return "top-k"
    return "sampling"


def match_chen(task: str, temperature: float, top_p: float = 1.0,
               top_k: int = 0) -> Optional[ChenRow]:
    """The Table 1 benchmark with the same task and sampling method, if any."""
    method = sampling_method(temperature, top_p, top_k)
    for row in CHEN_TABLE1:
        if row.task == task and row.method == method:
            return row
    return None
