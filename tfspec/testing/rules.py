"""`generate_with_rules`: the decoding loop with a replaced acceptance rule or draft sampler."""

from tfspec import generation


def generate_with_rules(target, prompts, *, accept_fn=None, draft_sample_fn=None,
                        **generate_kwargs) -> generation.Generation:
    """`tfspec.generate`, with the rules of the loop replaced.

    Args:
      target, prompts, **generate_kwargs: as for `tfspec.generate`.
      accept_fn: replaces `tfspec.acceptance.accept` (same arguments and result), e.g.
        `wrong_rules.inverted_ratio`; None keeps the rule of `acceptance` (default: the
        exact rule).
      draft_sample_fn: replaces `tfspec.sampling.sample_categorical` for the draft's
        tokens (float32 [batch, V] probabilities, float32 [batch] uniforms -> int32
        [batch]), e.g. `wrong_rules.argmax_draft`; None keeps the sampler of `acceptance`
        (default: `sample_categorical`).

    Returns:
      The `Generation`.
    """
    return generation._generate(  # pylint: disable=protected-access
        target, prompts, accept_fn=accept_fn, draft_sample_fn=draft_sample_fn,
        **generate_kwargs)
