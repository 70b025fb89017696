"""Growing a trained T5 draft's decoder by layers that start as the identity.

    grown = grow_decoder(draft, num_decoder_layers=2)

Why: the embedded draft's one decoder layer caps how closely it can follow its target at
T = 1 (held-out overlap ~0.67 after every objective tried), and training a deeper draft from
scratch would throw away what the shipped one learned. A T5 block adds its sublayers'
outputs to the residual stream, x + o(attention(...)) and x + wo(ffn(...)), so a block whose
output projections (self-attention `o`, cross-attention `o`, feed-forward `wo`) are zero
returns its input exactly. Appended after the last trained block, such blocks leave every
logit of the draft unchanged, and fine-tuning then starts from the shipped draft rather
than from a worse one. Their other weights keep the random initialisation, so the
gradient through the zero projections is not zero.
"""

import dataclasses

import numpy as np

from tfspec.models import t5 as t5_lib

# The projections that write a block's sublayers into the residual stream (HF names after
# "decoder.block.{i}."): zero, the block is the identity.
_RESIDUAL_OUTPUTS = ("layer.0.SelfAttention.o.weight", "layer.1.EncDecAttention.o.weight",
                     "layer.2.DenseReluDense.wo.weight")


def grow_decoder(draft: t5_lib.T5, num_decoder_layers: int, seed: int = 0) -> t5_lib.T5:
    """A copy of `draft` with `num_decoder_layers` decoder blocks, the new ones appended
    after its own as identity blocks (see the module docstring).

    The copy keeps the draft's weights (by HF name), its target-encoder adapter, draft
    vocabulary, tokenizer path and prompt limit, so its logits equal the draft's.

    Args:
      draft: a T5 (`tfspec.models.T5`).
      num_decoder_layers: at least the draft's own count (equal: a plain copy).
      seed: seed of the new blocks' random (non-output) weights.

    Raises:
      ValueError: fewer layers than the draft has.
    """
    have = draft.config.num_decoder_layers
    if num_decoder_layers < have:
        raise ValueError(f"the draft has {have} decoder layers; grow_decoder cannot drop "
                         f"layers (asked for {num_decoder_layers})")
    config = dataclasses.replace(draft.config, num_decoder_layers=int(num_decoder_layers))
    grown = t5_lib.T5(config, seed=seed, dtype=draft.model_dtype)
    source = draft.hf_weight_map()
    for name, (variable, _) in grown.hf_weight_map().items():
        if name in source:
            variable.assign(source[name][0])
        elif name.startswith("decoder.block.") and name.split(".", 3)[3] in _RESIDUAL_OUTPUTS:
            variable.assign(np.zeros(variable.shape, variable.dtype))
    if draft.reads_target_encoder:
        grown.attach_target_encoder(draft.target_encoder_projection.numpy(),
                                    draft.target_encoder_fingerprint,
                                    draft.target_encoder_name)
    grown.set_draft_vocabulary(draft.draft_vocab_ids)
    grown.tokenizer_path = draft.tokenizer_path
    grown.max_prompt_length = draft.max_prompt_length
    return grown
