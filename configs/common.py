"""What the configs in configs/ share: one parser of the `:ARG` suffix, and the evals.run
flag defaults.

`--config configs/NAME.py:ARG` calls `get_config(ARG)` (`get_config(None)` without a
suffix). Every config reads its ARG with `variant` and states its variants in `VARIANTS`.
Every evals.run config (not the training recipe `zoo_tiny_code.py`) starts from
`run_config(...)` and states only what differs from the defaults.
"""

from typing import Mapping, Optional, Sequence

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


def variant(arg: Optional[str], name: str, choices: Sequence[str],
            default: Optional[str] = None,
            aliases: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The variant a config's `:ARG` names.

    Args:
      arg: the ARG of `--config configs/NAME.py:ARG`, or None.
      name: the config's name, for the error message.
      choices: the accepted variants; empty for a config that takes no ARG.
      default: the variant of `arg` None; None (with choices) makes ARG required.
      aliases: other spellings, e.g. {"1": "t1"}.

    Returns:
      One of `choices` (or None for a config without variants).

    Raises:
      ValueError: `arg` is not a variant, or is missing where one is required.
    """
    arg = arg if arg else default
    arg = (aliases or {}).get(arg, arg)
    if arg is None and not choices:
        return None
    if arg in choices:
        return arg
    if not choices:
        raise ValueError(f"{name} takes no argument (configs/{name}.py), got {arg!r}")
    raise ValueError(f"{name} takes one of {', '.join(choices)} "
                     f"(e.g. configs/{name}.py:{choices[0]}), got {arg!r}")


def run_config(**overrides) -> ml_collections.ConfigDict:
    """evals.run flag values: the shared defaults updated with `overrides`."""
    return ml_collections.ConfigDict({**_DEFAULTS, **overrides})
