"""Adaptive draft length, `tfspec.generate(..., k="auto")`: how many tokens to draft.

Two levels, neither of which changes the output distribution:

* Within a request (compiled, `decoding.decode_loop` with `LoopConfig.adaptive`): every row
  drafts up to its own horizon, stops after a draft its draft model is unsure of
  (q(d) < `confidence`, Hugging Face's `assistant_confidence_threshold`), and moves its
  horizon by Hugging Face's `num_assistant_tokens` schedule (+ 2 after a fully accepted
  horizon, - 1 after a rejection), within [1, k_max]. k_max is compiled; the verify window
  is k_max + 1 wide whatever the horizon (static shapes).
* Across requests (here, in Python): a `Controller` per (target, draft, sampling, settings)
  carries the horizon from one request to the next, and measures the milliseconds per
  token of adaptive speculative decoding and of plain autoregressive decoding per request
  shape (batch, prompt bucket, max_new_tokens), then runs the faster one, judged over all
  shapes measured both ways (`Controller.choose`). The slower mode is measured again at
  requests `revisit`, 2 `revisit`, 4 `revisit`, ..., so a workload whose acceptance changes
  is noticed, at a cost that shrinks as the workload runs. Calls that
  compiled a loop are not counted as measurements. This is the fallback to autoregressive decoding where speculation loses:
  measured, not predicted, because on this project's CPU the walltime formula's premises
  (a verify that costs one step, free rounds, no per-request draft encoder) do not hold.

Both modes are exact, so a sequence's distribution is the target's whichever mode a
request gets; which mode that is depends on timings, so sampled tokens are reproducible
across processes only with `fallback=False` (or a fixed k).
"""

import dataclasses
import math
import weakref
from typing import Any, Dict, Optional, Tuple

SPECULATIVE = "speculative"
AUTOREGRESSIVE = "autoregressive"
_EMA = 0.3  # Weight of the newest measurement in a mode's running ms/token.


@dataclasses.dataclass(frozen=True)
class AutoDraft:
    """The settings of `k="auto"` (pass an instance as `k` to change them).

    Attributes:
      k_max: the compiled maximum draft length (the verify window is k_max + 1 wide).
      confidence: a row stops drafting after a draft d with q(d) below this (0: never).
        Off by default: the verify window is k_max + 1 wide whatever a row drafted, so an
        early stop saves only draft steps (~0.16 target steps each for the embedded pair)
        and loses every later token the draft would have got right. Measured on the
        embedded pair (`bench.speedup`, 8 held-out prompts, batch 1, autoregressive
        fallback off): greedy 1.12x at 0, 1.08x at 0.1, 0.90x at 0.4 (Hugging Face's
        default; acceptance fell from 0.93 to 0.64), against 1.17-1.21x for fixed k = 4;
        T = 1: 0.53x at 0.1 against 0.62x for k = 4.
      initial_k: the horizon of the first request, default min(4, k_max) (later requests
        start from the horizon the previous one ended with).
      fallback: run autoregressive decoding for request shapes where it measured faster.
      revisit: re-measure the slower mode at this request, then at twice, four times ...
        that many requests (>= 2).
    """

    k_max: int = 4
    confidence: float = 0.0
    initial_k: Optional[int] = None
    fallback: bool = True
    revisit: int = 16

    def __post_init__(self):
        if int(self.k_max) != self.k_max or self.k_max < 1:
            raise ValueError(f"AutoDraft.k_max must be an integer >= 1, got {self.k_max}")
        if not 0.0 <= float(self.confidence) < 1.0:
            raise ValueError(f"AutoDraft.confidence must be in [0, 1), got {self.confidence}")
        if self.initial_k is not None and (int(self.initial_k) != self.initial_k
                                           or not 1 <= self.initial_k <= self.k_max):
            raise ValueError(f"AutoDraft.initial_k must be an integer in [1, k_max = "
                             f"{self.k_max}], got {self.initial_k}")
        if int(self.revisit) != self.revisit or self.revisit < 2:
            raise ValueError(f"AutoDraft.revisit must be an integer >= 2, got {self.revisit}")

    @property
    def first_horizon(self) -> int:
        return int(self.initial_k) if self.initial_k is not None else min(4, int(self.k_max))


def resolve(k) -> Optional[AutoDraft]:
    """The `AutoDraft` that `k` asks for ("auto" or an instance), or None for a fixed k.

    Raises:
      ValueError: a string other than "auto".
    """
    if isinstance(k, AutoDraft):
        return k
    if isinstance(k, str):
        if k.strip().lower() != "auto":
            raise ValueError(f'k must be a non-negative integer or "auto", got {k!r}')
        return AutoDraft()
    return None


class Controller:
    """The cross-request state of `k="auto"` for one (target, draft, sampling, settings)."""

    def __init__(self, auto: AutoDraft):
        self.auto = auto
        self.horizon = auto.first_horizon
        self.ms_per_token: Dict[Tuple[Any, str], float] = {}
        self.requests: Dict[Any, int] = {}
        self._total = 0
        self._next_revisit = auto.revisit

    def choose(self, shape) -> str:
        """The mode of the next request of `shape`: SPECULATIVE or AUTOREGRESSIVE.

        Exploration: a shape's first requests measure speculation, then autoregressive
        decoding (a request that compiled is not a measurement), until some shape has been
        measured both ways. From then on the decision is pooled over every shape measured
        both ways (the mean log ratio of their ms/token; single requests are noisy, and the
        ratio depends far more on the sampling settings than on the prompt bucket), and
        every shape runs the faster mode, except every `revisit`-th request, which runs
        the slower one to keep measuring it.
        """
        count = self.requests.get(shape, 0)
        self.requests[shape] = count + 1
        self._total += 1
        if not self.auto.fallback:
            return SPECULATIVE
        log_ratio = self.pooled_log_ratio()
        if log_ratio is None:  # Nothing measured both ways yet: explore this shape.
            if (shape, SPECULATIVE) not in self.ms_per_token:
                return SPECULATIVE
            return AUTOREGRESSIVE
        faster, slower = ((SPECULATIVE, AUTOREGRESSIVE) if log_ratio <= 0
                          else (AUTOREGRESSIVE, SPECULATIVE))
        if self._total >= self._next_revisit:
            self._next_revisit *= 2
            return slower
        return faster

    def pooled_log_ratio(self) -> Optional[float]:
        """Mean over shapes measured both ways of log(speculative / autoregressive ms per
        token); None before any shape has both (negative: speculation is faster)."""
        logs = [math.log(self.ms_per_token[(shape, SPECULATIVE)]
                         / self.ms_per_token[(shape, AUTOREGRESSIVE)])
                for shape in self.requests
                if (shape, SPECULATIVE) in self.ms_per_token
                and (shape, AUTOREGRESSIVE) in self.ms_per_token]
        return sum(logs) / len(logs) if logs else None

    def record(self, shape, mode: str, seconds: float, tokens: int, compiled: bool,
               final_horizons=None) -> None:
        """Feeds back one request: its wall time, tokens, whether it compiled, and (for a
        speculative request) the rows' horizons at the end."""
        if not compiled and tokens > 0:
            ms = 1e3 * float(seconds) / int(tokens)
            key = (shape, mode)
            old = self.ms_per_token.get(key)
            self.ms_per_token[key] = ms if old is None else (1 - _EMA) * old + _EMA * ms
        if mode == SPECULATIVE and final_horizons is not None and len(final_horizons):
            mean = float(sum(int(h) for h in final_horizons)) / len(final_horizons)
            self.horizon = min(max(int(round(mean)), 1), self.auto.k_max)


# target -> draft -> {(sampling, AutoDraft[, acceptance]): Controller}; weak keys, so a
# dropped model takes its controllers with it.
_CONTROLLERS: "weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary]" = (
    weakref.WeakKeyDictionary())


def controller(target, draft, sampling, auto: AutoDraft, acceptance=None) -> Controller:
    """The `Controller` of this (target, draft, sampling, settings), created on first use.

    `acceptance`: None for the exact rule, else the (hashable) typical-acceptance settings,
    whose accepted runs and timings are not the exact rule's, so they get a controller of
    their own.
    """
    per_draft = _CONTROLLERS.setdefault(target, weakref.WeakKeyDictionary())
    table = per_draft.setdefault(draft, {})
    key = (sampling, auto) if acceptance is None else (sampling, auto, acceptance)
    if key not in table:
        table[key] = Controller(auto)
    return table[key]


def reset() -> None:
    """Forgets every controller's measurements and horizons (tests, benchmarks)."""
    _CONTROLLERS.clear()
