"""Shared evals.run flag defaults of the experiment configs in configs/.

Every evals.run config (not the training recipe `zoo_tiny_code.py`) starts from
`run_config(...)` and states only what differs from these defaults.
"""

import ml_collections

# evals.run flag values that every published row and embedded-default run shares.
_DEFAULTS = {
    "top_k": 0,
    "top_p": 1.0,
    "batch_size": 1,
    "num_samples": 1,
    "baseline": True,
    "seed": 0,
}


def run_config(**overrides) -> ml_collections.ConfigDict:
    """evals.run flag values: the shared defaults updated with `overrides`."""
    return ml_collections.ConfigDict({**_DEFAULTS, **overrides})
