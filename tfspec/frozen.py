"""Frozen weights: a promise that a model's weights stay as they are, so decoding need not
check them on every request.

On CPU, a T5 model (and the feature and Medusa drafts) decodes through panel copies of its
kernels (`tfspec.kernels.PanelCache`), packed for few-row products. A copy may go stale
when the weights change (training, `load_weights`), so every compiled `tfspec.generate`
call checks, inside its program, a fingerprint of every weight its panels were packed from.
That check is one read of the weights from memory: 4-5 ms of a ~20 ms request of the
embedded target (79 MB of float32 kernels), and ~1 ms more for the embedded draft.

A model that serves requests and is never trained in between does not need it.
`freeze_weights(model)` packs the model's panels once and declares its weights final:
every compiled call with a frozen model skips that model's check (the check is a branch
of the one compiled program, so freezing or unfreezing compiles nothing).
`unfreeze_weights(model)` restores the check and verifies that the weights did not change
while frozen. The evaluation harness (`evals.run`, `pipelines`) and the benchmarks
(`bench/`) freeze the models they load; they never change them.

    target = tfspec.load_model("zoo:tiny-code-target")
    draft = tfspec.load_model("zoo:tiny-code-draft")
    with tfspec.frozen_weights(target, draft):
        for prompts in requests:
            tfspec.generate(target, prompts, draft=draft, k=4)
    # Leaving the block unfreezes both and raises if their weights changed inside it.

Changing a frozen model's weights is a bug that nothing can stop at the source: an
optimizer or a checkpoint restore writes the TensorFlow variables directly. Decoding would
then mix the new weights (the encoder, the norms) with panels packed from the old ones
(the decode products): outputs of neither model. `unfreeze_weights` reports it, in one
line, as soon as the model is unfrozen. A feature draft or Medusa heads also pack their
target's LM head: freeze them only while their target's weights stay as they are too.
"""

import contextlib
import weakref
from typing import Iterator

from tfspec import kernels

# {model: True}: the frozen models (weak keys: freezing never keeps a model alive).
_FROZEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class WeightsChangedError(RuntimeError):
    """A model's weights changed while it was frozen (`freeze_weights`)."""


def freeze_weights(*models) -> None:
    """Declares each model's weights final until `unfreeze_weights`: compiled
    `tfspec.generate` calls stop checking its kernel panels against its weights.

    Packs the panels now (from the current weights), so the first request does not. Models
    without panels (eager or GPU decoding, NGram and PromptLookup drafts) are accepted and
    have nothing to skip. Freezing a frozen model does nothing.
    """
    for model in models:
        if model is None or model in _FROZEN:
            continue
        refresh = getattr(model, "refresh_decode_panels", None)
        if refresh is not None:
            refresh()
        _FROZEN[model] = True


def unfreeze_weights(*models) -> None:
    """Makes compiled calls check each model's panels again, then verifies that its
    weights are those its panels were packed from.

    Raises:
      WeightsChangedError: a model's weights changed while it was frozen (all the models
        are unfrozen first; outputs decoded while they were frozen and changed followed
        the weights of when they were frozen).
    """
    changed = []
    for model in models:
        if model is None or _FROZEN.pop(model, None) is None:
            continue
        cache = kernels.existing_panel_cache(model)
        if cache is not None and cache.ready and not cache.matches_sources():
            changed.append(type(model).__name__)
    if changed:
        raise WeightsChangedError(
            f"the weights of {', '.join(changed)} changed while frozen "
            f"(tfspec.freeze_weights): calls decoded in between used the frozen weights; "
            f"unfreeze a model before changing its weights")


def is_frozen(model) -> bool:
    """Whether `model` is frozen (`freeze_weights`)."""
    return model is not None and model in _FROZEN


@contextlib.contextmanager
def frozen_weights(*models) -> Iterator[None]:
    """`freeze_weights(*models)` for the block, `unfreeze_weights(*models)` after it (which
    raises `WeightsChangedError` if their weights changed inside it). Models frozen before
    the block stay frozen after it."""
    fresh = [m for m in models if m is not None and not is_frozen(m)]
    freeze_weights(*fresh)
    try:
        yield
    finally:
        unfreeze_weights(*fresh)
