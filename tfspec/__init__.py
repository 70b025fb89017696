"""tfspec: exact speculative decoding for T5-family models in TensorFlow/Keras."""

import os as _os

# Keras 3 picks its backend at import time; tfspec is a TensorFlow library.
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")
