"""Adaptive draft length, `tfspec.generate(..., k="auto")`: how many tokens to draft.

Two levels, neither of which changes the output distribution:

* Within a request (compiled, `decoding.decode_loop` with `LoopConfig.adaptive`): every row
  drafts up to its own horizon, stops after a draft its draft model is unsure of
  (q(d) < `confidence`, Hugging Face's `assistant_confidence_threshold`), and after each
  round moves its horizon by Hugging Face's `num_assistant_tokens` schedule (+ 2 after a
  fully accepted horizon, - 1 after a rejection; `draft_cost=None`) or, with `draft_cost`
  = c (default 0.5), takes the walltime formula's best draft length at its running overlap,
  (1 + a + ... + a^h) / (1 + h c), within [1, the request's window]. The
  window is compiled; the verify is window + 1 wide (static shapes), but a T5 target on
  CPU multiplies only each row's first 1 + (its drafts) entries (`live_width`, see
  `decoding.decode_loop`). A window of 1 leaves nothing to adapt (every row drafts one
  token a round), so it runs fixed k = 1's loop (`tfspec.generate`).
* Across requests (here, in Python): a `Controller` per (target, draft, sampling, settings)
  chooses each speculative request's window (with `draft_cost` the formula's best draft
  length at the overlap its last requests measured, else k_max; `Controller.window`: a wide
  window costs its width even where rows draft less), carries the horizon from one
  request to the next, and decides per request between adaptive speculative decoding and
  plain autoregressive decoding from what both measured (`Controller.choose`): it
  explores both modes (alternating, `explore` requests each),
  then runs the one whose fitted request time is lower, and measures the slower one again
  at requests `revisit`, 2 `revisit`, 4 `revisit`, ..., so a workload whose acceptance
  changes is noticed, at a cost that shrinks as the workload runs. Calls that compiled a
  loop are not counted as measurements. This is the fallback to autoregressive decoding
  where speculation loses: measured, not predicted, because on this project's CPU the
  walltime formula's premises (a verify that costs one step, free rounds, no per-request
  draft encoder) do not hold.

  Requests differ in length, so their ms per token cannot be compared one for one: a
  request's time is a per-request part (the encoders over its prompt bucket, the call) plus
  a per-token part, and a 10-token answer's ms per token is mostly the first. The controller
  therefore fits, per mode, seconds = a + b x tokens + c x (rows x prompt bucket) over its
  measurements (least squares), compares the two fits at the mean request of the
  workload, and keeps exploring while they are within two standard errors of each other.
  Comparing per-request ms per token instead (the first version, one EMA per request
  shape) settled on the wrong mode in a HumanEval sweep: 18 of 164 requests speculated,
  auto 1.01x against 1.20x at k = 4. Replayed on recorded per-request times of the example
  report's sweeps (`tests/tfspec/test_adaptive.py`, 30 orders each), the fits reach 96% of
  the better fixed mode in HumanEval at T = 0 (the first version 90%), 97% at T = 1 (95%)
  and 97% in docsum at T = 0 (96%). The fits are kept as running sums (`_WindowFit`),
  because a decision is part of the timed request.

Both modes are exact, so a sequence's distribution is the target's whichever mode a
request gets; which mode that is depends on timings, so sampled tokens are reproducible
across processes only with `fallback=False` (or a fixed k).
"""

import collections
import contextlib
import dataclasses
import math
import weakref
from typing import Any, Dict, Optional, Tuple

import numpy as np

SPECULATIVE = "speculative"
AUTOREGRESSIVE = "autoregressive"
_WINDOW = 256  # Measurements kept per mode: the fits follow a workload that changes.
# The overlap a request's window is chosen from: the last this-many speculative requests'
# verified positions, and before any, `PRIOR_OVERLAP` worth `PRIOR_POSITIONS` positions
# (also the in-loop schedule's prior, `decoding._formula_horizon`).
_OVERLAP_REQUESTS = 16
# Optimistic: a first request (and a row's first round) drafts the whole k_max, so an
# untrained controller's first window is k_max, and evaluations can compile every window
# ahead of time (`evals`: one fresh controller per k_max).
PRIOR_OVERLAP = 1.0
PRIOR_POSITIONS = 1.0
# A request's window changes only when another one scores this much better: a window not
# compiled yet for the prompt bucket costs a compile, so near-ties must not flip it.
_WINDOW_MARGIN = 0.03
_Z = 2.0  # Explore while the two modes' fitted times are within this many standard errors...
# ...unless each mode has this many measurements. 12, not 24: replayed in 30 orders
# (`tests/tfspec/test_adaptive.py`'s recorded sweeps), 12 kept 97.5 / 97.9 / 97.9% of the
# better fixed mode in HumanEval T = 0 / T = 1 / docsum T = 0 against 96.6 / 97.0 / 97.6%
# at 24 (8: 97.9 / 98.2 / 97.7%, with a worse worst order in HumanEval T = 0).
_EXPLORE_CAP = 12


@dataclasses.dataclass(frozen=True)
class AutoDraft:
    """The settings of `k="auto"` (pass an instance as `k` to change them).

    Attributes:
      k_max: the largest draft length (window) a request is compiled for.
      confidence: a row stops drafting after a draft d with q(d) below this (0: never).
        Off by default: an early stop saves draft steps (~0.16 target steps each for the
        embedded pair) and, since the verify skips entries past the round's drafts
        (`live_width`), verify rows, but loses every later token the draft would have got
        right. Measured before the verify skipped them, on the
        embedded pair (`bench.speedup`, 8 held-out prompts, batch 1, autoregressive
        fallback off): greedy 1.12x at 0, 1.08x at 0.1, 0.90x at 0.4 (Hugging Face's
        default; acceptance fell from 0.93 to 0.64), against 1.17-1.21x for fixed k = 4;
        T = 1: 0.53x at 0.1 against 0.62x for k = 4. Rechecked with the verify skipping
        (2026-12-04, `--k 4,auto --auto_fallback false --temperature 1`, one run per
        threshold): T = 1 auto / k = 4 in the same run 0.84 and 0.83 at 0.3 (beta 0.43),
        0.92 at 0 (beta 0.54): still off.
      draft_cost: how a row's horizon moves from round to round.
        A float c (default 0.5): the walltime formula's best horizon for the row's running
        overlap a, argmax over h of (1 + a + ... + a^h) / (1 + h c), c being what one more
        draft position (a draft step and a verify row) costs over the rest of a round;
        each request's window is then also the formula's best at the overlap of the last
        requests (`Controller.window`). 0.5 is what a draft position costs the embedded
        pair in whole rounds: it picks h = 1 at a = 0.67 (T = 1), 3-4 at a >= 0.9
        (greedy).
        None: Hugging Face's `num_assistant_tokens` schedule, + 2 after a fully accepted
        horizon and - 1 after a rejection, in a k_max window. It measures nothing and
        settles where a full acceptance is about a third likely (h ~ 3 at a = 0.67),
        whatever a draft position costs: at T = 1 on the embedded pair its rounds cost
        more than the tokens they gain, so `k="auto"` spent its exploring requests at
        ~0.75x autoregressive speed (the example report's T = 1 sweeps) and settled on
        autoregressive decoding where fixed k = 1 was faster.
        Measured side by side (`python -m bench.speedup --k 1,2,4,auto --temperature 0,1
        --repeats 5 --auto_draft_cost hf,0.5`, 8 held-out prompts, 2026-12-06 evening):
        T = 1 1.32x with 0.5 against 0.81x with None (fixed k = 1 1.18x), plain ratios
        that partly measured the lengths each mode sampled (at one request length,
        `matched_speedup`, a later run read auto 1.02x, k = 1 1.01x); greedy
        1.23x against 1.34x in that run and 1.34x against 1.24x in the next (`--k 4,auto
        --temperature 0 --repeats 7 --auto_draft_cost hf,0.25,0.5`; 0.25 1.32x, k = 4
        1.33x): the same within this machine's spread. None was the default until then.
        Cost: a float compiles one loop per window the controller picks (1 .. k_max, per
        prompt bucket; `evals` warms them all), None one; where programs' memory is short
        (e.g. many models in one process) pass None.
      initial_k: the horizon of the first request, default min(4, k_max) (later requests
        start from the horizon the previous one ended with).
      fallback: run autoregressive decoding when it measured faster.
      explore: requests measured in each mode before the controller decides (>= 1).
      revisit: re-measure the slower mode at this request, then at twice, four times ...
        that many requests (>= 2).
    """

    k_max: int = 4
    confidence: float = 0.0
    draft_cost: Optional[float] = 0.5
    initial_k: Optional[int] = None
    fallback: bool = True
    explore: int = 4
    revisit: int = 16

    def __post_init__(self):
        if int(self.k_max) != self.k_max or self.k_max < 1:
            raise ValueError(f"AutoDraft.k_max must be an integer >= 1, got {self.k_max}")
        if not 0.0 <= float(self.confidence) < 1.0:
            raise ValueError(f"AutoDraft.confidence must be in [0, 1), got {self.confidence}")
        if self.draft_cost is not None and not (math.isfinite(float(self.draft_cost))
                                                and float(self.draft_cost) >= 0.0):
            raise ValueError(f"AutoDraft.draft_cost must be a number >= 0 or None, got "
                             f"{self.draft_cost}")
        if self.initial_k is not None and (int(self.initial_k) != self.initial_k
                                           or not 1 <= self.initial_k <= self.k_max):
            raise ValueError(f"AutoDraft.initial_k must be an integer in [1, k_max = "
                             f"{self.k_max}], got {self.initial_k}")
        if int(self.explore) != self.explore or self.explore < 1:
            raise ValueError(f"AutoDraft.explore must be an integer >= 1, got {self.explore}")
        if int(self.revisit) != self.revisit or self.revisit < 2:
            raise ValueError(f"AutoDraft.revisit must be an integer >= 2, got {self.revisit}")

    @property
    def first_horizon(self) -> int:
        return int(self.initial_k) if self.initial_k is not None else min(4, int(self.k_max))


def formula_score(overlap: float, h: int, draft_cost: float) -> float:
    """Tokens per unit of round cost of drafting h at per-position `overlap` a and
    per-draft cost c: (1 + a + ... + a^h) / (1 + h c)."""
    a = min(max(float(overlap), 0.0), 1.0)
    return sum(a ** i for i in range(int(h) + 1)) / (1.0 + int(h) * float(draft_cost))


def formula_horizon(overlap: float, k_max: int, draft_cost: float) -> int:
    """The walltime formula's best draft length in [1, k_max]: argmax over h of
    `formula_score` (the first of equal scores). The compiled loop's per-row version is
    `decoding._formula_horizon`."""
    scores = [formula_score(overlap, h, draft_cost) for h in range(1, int(k_max) + 1)]
    return 1 + int(np.argmax(scores))


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


class _WindowFit:
    """Least squares of a mode's request seconds on x = [1, tokens, rows x prompt bucket]
    over its last `_WINDOW` measurements, kept as running sums (X^T X, X^T y, y^T y):
    `Controller.choose` runs inside the timed `tfspec.generate` call, so a decision must cost
    microseconds, not the ~1.3 ms of refitting the window from scratch (measured: that
    slowed the requests it chose autoregressive by ~4% at docsum's 35 ms requests)."""

    def __init__(self):
        self.window: collections.deque = collections.deque()
        self.gram = np.zeros([3, 3])        # X^T X; row 0 is [count, sum tokens, sum width]
        self.moment = np.zeros([3])         # X^T y
        self.square = 0.0                   # y^T y

    def __len__(self) -> int:
        return len(self.window)

    def add(self, width: float, tokens: float, seconds: float) -> None:
        self._update(np.array([1.0, tokens, width]), seconds, 1.0)
        self.window.append((width, tokens, seconds))
        if len(self.window) > _WINDOW:
            old_width, old_tokens, old_seconds = self.window.popleft()
            self._update(np.array([1.0, old_tokens, old_width]), old_seconds, -1.0)

    def _update(self, x: np.ndarray, y: float, sign: float) -> None:
        self.gram += sign * np.outer(x, x)
        self.moment += sign * y * x
        self.square += sign * y * y

    def mean_features(self) -> np.ndarray:
        """Sums of [1, tokens, width] over the window (divide by len for the mean)."""
        return self.gram[0]

    def predict(self, features: np.ndarray) -> Tuple[float, float]:
        """(seconds, its variance) at `features` [1, tokens, width]; the variance is inf
        while the measurements are too few to estimate it."""
        # The pseudo-inverse gives lstsq's minimum-norm solution, which still predicts the
        # mean time at the mean features when a feature does not vary (e.g. every request
        # decoded max_new_tokens at one bucket).
        # One symmetric eigendecomposition gives both the pseudo-inverse and the rank.
        values, vectors = np.linalg.eigh(self.gram)
        kept = values > values[-1] * 1e-12
        inverse = (vectors[:, kept] / values[kept]) @ vectors[:, kept].T
        coef = inverse @ self.moment
        predicted = float(coef @ features)
        # Degrees of freedom over the identifiable parameters: the rank, not 3, when a
        # feature does not vary.
        dof = len(self.window) - int(np.sum(kept))
        if dof <= 0:
            return predicted, math.inf
        residual = max(self.square - 2.0 * float(coef @ self.moment)
                       + float(coef @ self.gram @ coef), 0.0)
        return predicted, residual / dof * float(features @ inverse @ features)


class Controller:
    """The cross-request state of `k="auto"` for one (target, draft, sampling, settings).

    Attributes:
      horizon: the draft horizon the next speculative request starts from.
      measurements: {mode: `_WindowFit`} over the last `_WINDOW` uncompiled requests of
        each mode (`len` is their number).
    """

    def __init__(self, auto: AutoDraft):
        self.auto = auto
        self.horizon = auto.first_horizon
        # (summed overlap, verified positions) of the last speculative requests.
        self._overlaps: collections.deque = collections.deque(maxlen=_OVERLAP_REQUESTS)
        self._window: Optional[int] = None
        self.measurements: Dict[str, _WindowFit] = {
            mode: _WindowFit() for mode in (SPECULATIVE, AUTOREGRESSIVE)}
        self._total = 0
        self._next_revisit = auto.revisit

    def choose(self, shape) -> str:
        """The mode of the next request of `shape` (rows, prompt bucket, max_new_tokens):
        SPECULATIVE or AUTOREGRESSIVE.

        Exploration: the mode with fewer measurements (speculation first), until each has
        `explore` and the fitted log ratio of the two modes' times (`log_ratio`) is more
        than `_Z` standard errors from 0, or each has `_EXPLORE_CAP` (modes too close to
        tell apart cost about the same either way). Then the faster mode, except every
        `revisit`-th request (then twice, four times ... that many), which runs the slower
        one to keep measuring it. A request that compiled is not a measurement.
        """
        del shape  # The fits read a request's shape from its measurement.
        self._total += 1
        if not self.auto.fallback:
            return SPECULATIVE
        counts = {mode: len(m) for mode, m in self.measurements.items()}
        fewer = (SPECULATIVE if counts[SPECULATIVE] <= counts[AUTOREGRESSIVE]
                 else AUTOREGRESSIVE)
        if min(counts.values()) < self.auto.explore:
            return fewer
        log_ratio, error = self.log_ratio()
        if abs(log_ratio) < _Z * error and min(counts.values()) < _EXPLORE_CAP:
            return fewer
        faster, slower = ((SPECULATIVE, AUTOREGRESSIVE) if log_ratio <= 0
                          else (AUTOREGRESSIVE, SPECULATIVE))
        if self._total >= self._next_revisit:
            self._next_revisit *= 2
            return slower
        return faster

    def overlap(self) -> float:
        """The running per-position overlap of the last speculative requests (beta summed
        over their verified positions, over those positions), shrunk towards
        `PRIOR_OVERLAP`."""
        beta = sum(b for b, _ in self._overlaps) + PRIOR_OVERLAP * PRIOR_POSITIONS
        return beta / (sum(v for _, v in self._overlaps) + PRIOR_POSITIONS)

    def window(self) -> int:
        """The draft length the next speculative request is compiled for, in [1, k_max]:
        with `draft_cost` (the default), the formula's best length at the running
        `overlap` (`formula_horizon`); k_max under Hugging Face's schedule.

        Why not always k_max: a round pays for its window's width even where rows draft
        less (verify rows, V-wide probabilities at T > 0, the rule), measured on the
        embedded pair at T = 1 (64 new tokens, no EOS; drafts counted before the
        statistics fix, equal in both windows): ~2.4 drafts per round in a k_max = 4
        window ran 1.00x autoregressive speed, in a k_max = 3 window 1.09x (both auto runs
        then paid the eager op of `AutoDraft.draft_cost`'s note), fixed k = 2 1.16x. Each
        window is one more compiled program per prompt bucket, made when first
        chosen, so the window moves only when another scores `_WINDOW_MARGIN` better."""
        if self.auto.draft_cost is None:
            return int(self.auto.k_max)
        overlap, cost = self.overlap(), float(self.auto.draft_cost)
        best = formula_horizon(overlap, self.auto.k_max, cost)
        if (self._window is None or formula_score(overlap, best, cost)
                > (1.0 + _WINDOW_MARGIN) * formula_score(overlap, self._window, cost)):
            self._window = best
        return self._window

    def predicted_seconds(self, mode: str, features: np.ndarray) -> Tuple[float, float]:
        """(seconds, its variance) of a request of `mode` with `features` [1, tokens,
        rows x prompt bucket], from the ordinary least-squares fit of the mode's
        measurements (variance inf while they are too few to estimate it)."""
        return self.measurements[mode].predict(features)

    def log_ratio(self) -> Tuple[float, float]:
        """(log(speculative / autoregressive fitted seconds), its standard error) at the
        workload's mean request (over both modes' measurements); negative: speculation is
        faster. (0, inf) when a fit predicts no positive time.

        Raises:
          ValueError: a mode has no measurement yet.
        """
        if not all(self.measurements.values()):
            raise ValueError("log_ratio needs a measurement of each mode")
        sums = sum(fit.mean_features() for fit in self.measurements.values())
        features = sums / sums[0]
        spec_s, spec_var = self.predicted_seconds(SPECULATIVE, features)
        ar_s, ar_var = self.predicted_seconds(AUTOREGRESSIVE, features)
        if spec_s <= 0 or ar_s <= 0:
            return 0.0, math.inf
        return (math.log(spec_s / ar_s),
                math.sqrt(spec_var / spec_s ** 2 + ar_var / ar_s ** 2))

    def record(self, shape, mode: str, seconds: float, tokens: int, compiled: bool,
               final_horizons=None, overlap: Optional[Tuple[float, float]] = None) -> None:
        """Feeds back one request of `shape` (rows, prompt bucket, max_new_tokens): its wall
        time, tokens, whether it compiled, and for a speculative request the rows' horizons
        at the end and (summed beta, verified positions) over its rows (compiled or not:
        acceptance does not depend on timing)."""
        if not compiled and tokens > 0:
            self.measurements[mode].add(float(shape[0]) * float(shape[1]), float(tokens),
                                        float(seconds))
        if mode == SPECULATIVE and overlap is not None and overlap[1] > 0:
            self._overlaps.append((float(overlap[0]), float(overlap[1])))
        if mode == SPECULATIVE and final_horizons is not None and len(final_horizons):
            mean = float(sum(int(h) for h in final_horizons)) / len(final_horizons)
            self.horizon = min(max(int(round(mean)), 1), self.auto.k_max)


# target -> draft -> {(sampling, AutoDraft[, acceptance]): Controller}; weak keys, so a
# dropped model takes its controllers with it.
_CONTROLLERS: "weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary]" = (
    weakref.WeakKeyDictionary())


_UNTRACKED = [0]  # Depth of `untracked` blocks.


@contextlib.contextmanager
def untracked():
    """Within this block every `k="auto"` call gets a fresh controller that is not kept:
    its call neither reads nor changes what later calls' controllers learnt. For warm-up
    calls that must compile a given window (a fresh controller's window is its k_max).
    Not thread-safe: for sequential warm-ups."""
    _UNTRACKED[0] += 1
    try:
        yield
    finally:
        _UNTRACKED[0] -= 1


def controller(target, draft, sampling, auto: AutoDraft, acceptance=None) -> Controller:
    """The `Controller` of this (target, draft, sampling, settings), created on first use
    (inside `untracked`, a new one each call, not kept).

    `acceptance`: None for the exact rule, else the (hashable) typical-acceptance settings,
    whose accepted runs and timings are not the exact rule's, so they get a controller of
    their own.
    """
    if _UNTRACKED[0]:
        return Controller(auto)
    per_draft = _CONTROLLERS.setdefault(target, weakref.WeakKeyDictionary())
    table = per_draft.setdefault(draft, {})
    key = (sampling, auto) if acceptance is None else (sampling, auto, acceptance)
    if key not in table:
        table[key] = Controller(auto)
    return table[key]


def reset() -> None:
    """Forgets every controller's measurements and horizons (tests, benchmarks)."""
    _CONTROLLERS.clear()
