"""tfspec: exact speculative decoding for T5-family models in TensorFlow/Keras."""

import os as _os

# Keras 3 picks its backend at import time; tfspec is a TensorFlow library.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from tfspec import quiet as _quiet  # noqa: E402  (before anything imports TensorFlow)

_quiet.import_tensorflow_quietly()

from tfspec._version import __version__  # noqa: E402
from tfspec import models  # noqa: E402
from tfspec.checkpoints import load_model, save_model  # noqa: E402
from tfspec.generation import Generation, generate  # noqa: E402
from tfspec.frozen import freeze_weights, frozen_weights, unfreeze_weights  # noqa: E402
from tfspec.adaptive import AutoDraft  # noqa: E402
from tfspec.acceptance import TypicalAcceptance  # noqa: E402
from tfspec.sampling import Sampling  # noqa: E402
from tfspec.stats import DecodeStats  # noqa: E402
from tfspec.tokenizer import Tokenizer, load_tokenizer  # noqa: E402

__all__ = ["AutoDraft", "DecodeStats", "Generation", "Sampling", "Tokenizer",
           "TypicalAcceptance", "__version__", "freeze_weights", "frozen_weights", "generate",
           "load_model", "load_tokenizer", "models", "save_model", "unfreeze_weights"]
