"""Memory estimates that refuse a model or a request before it allocates anything.

    memory.check_fits(nbytes, "the model of DIR/config.json", "check d_model ...")
    memory.decode_buffer_bytes(target, draft, batch=8, max_new_tokens=128, k=4)

The budget is this machine's memory: physical RAM, or the cgroup's `memory.max` when that
is lower. Estimates count the large buffers only (weights; the decoder KV caches and token
buffers of the decode loop), so a request refused here could never have run, and one
accepted here may still fail on a busy machine (the check is against the whole budget, not
what is free).
"""

import os
from typing import Any, Optional

from tfspec.models.t5_config import T5Config

_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max",
                  "/sys/fs/cgroup/memory/memory.limit_in_bytes")
GIB = float(1 << 30)


def machine_bytes() -> int:
    """Physical memory, or the cgroup's limit if that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            with open(path, "r", encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return int(total)


def check_fits(nbytes: int, what: str, hint: str, budget: Optional[int] = None) -> None:
    """Raises ValueError (estimate, budget, hint) if `nbytes` exceed the machine's memory.

    Args:
      nbytes: estimated bytes.
      what: what needs them, e.g. "the model of DIR (1.2e12 parameters)".
      hint: how to fix it.
      budget: bytes available; default `machine_bytes()`.
    """
    budget = machine_bytes() if budget is None else int(budget)
    if nbytes > budget:
        raise ValueError(f"{what} needs about {nbytes / GIB:,.1f} GiB, more than this "
                         f"machine's {budget / GIB:,.1f} GiB of memory; {hint}")


def t5_num_parameters(config: T5Config) -> int:
    """Parameters of a T5 of `config` (as `tfspec.models.T5` builds it), without building it."""
    d, inner = config.d_model, config.num_heads * config.d_kv
    attention = 4 * d * inner
    feed_forward = (3 if config.is_gated_act else 2) * d * config.d_ff
    bias = config.relative_attention_num_buckets * config.num_heads
    encoder = config.num_layers * (attention + feed_forward + 2 * d) + bias + d
    decoder = (config.num_decoder_layers * (2 * attention + feed_forward + 3 * d)
               + bias + d)
    head = 0 if config.tie_word_embeddings else config.vocab_size * d
    return config.vocab_size * d + encoder + decoder + head


def _kv_bytes_per_position(model: Any) -> int:
    """Decoder KV-cache bytes per (row, position) of a T5-like model; 0 for other drafts."""
    config = getattr(model, "config", None)
    if hasattr(config, "feature_layers") and not hasattr(config, "num_heads"):
        return 0  # A MedusaConfig: the heads keep no cache.
    if hasattr(config, "feature_layers"):  # A FeatureDraftConfig: one float32 block.
        return 2 * config.num_heads * config.d_kv * 4
    if not isinstance(config, T5Config):
        return 0
    dtype = getattr(model, "compute_dtype", "float32")
    itemsize = 2 if "16" in str(dtype) else 4
    return 2 * config.num_decoder_layers * config.num_heads * config.d_kv * itemsize


def decode_buffer_bytes(target: Any, draft: Any, batch: int, max_new_tokens: int,
                        k: int = 0) -> int:
    """Bytes of the decode loop's per-request buffers: KV caches and token buffers.

    Both caches hold max_new_tokens + k + 2 positions per row (`decoding.LoopConfig`).
    """
    positions = int(max_new_tokens) + int(k) + 2
    per_position = _kv_bytes_per_position(target) + (
        _kv_bytes_per_position(draft) if draft is not None and k > 0 else 0)
    tokens = 4 * 4  # out ids and a few int32 [batch, positions] companions.
    return int(batch) * positions * (per_position + tokens)


def check_decode_request(target: Any, draft: Any, batch: int, max_new_tokens: int,
                         k: int = 0, budget: Optional[int] = None) -> None:
    """ValueError if a request's decode buffers cannot fit in the machine's memory."""
    nbytes = decode_buffer_bytes(target, draft, batch, max_new_tokens, k)
    check_fits(nbytes, f"decoding {int(batch)} rows x max_new_tokens={int(max_new_tokens)} "
                       f"(k={int(k)}; KV caches and token buffers)",
               "lower max_new_tokens or the batch size", budget)
