"""Deliberately wrong rules and models, for the power checks of the exactness tests.

A statistical test that passes the real loop proves little unless the same test, with the
same rows, rejects a loop that is subtly wrong. Each item below breaks exactness in one
specific way; the tests feed it through `tfspec.testing.generate_with_rules` (or, for a
wrong model, `tfspec.generate`) and require p < 1e-3.
"""

import tensorflow as tf

from tfspec import acceptance
from tfspec.testing.wrapped_model import WrappedModel


def inverted_ratio(target_probs, draft_probs, draft_ids, accept_uniforms, final_uniforms):
    """Wrong `accept_fn`: accepts with min(1, q/p) (letters swapped between the papers)."""
    k = draft_ids.shape[1]
    swapped_target = tf.concat([draft_probs, target_probs[:, k:]], axis=1)
    wrong = acceptance.accept(swapped_target, target_probs[:, :k], draft_ids,
                              accept_uniforms, final_uniforms)
    right = acceptance.accept(target_probs, draft_probs, draft_ids, accept_uniforms,
                              final_uniforms)
    # Keep the wrong acceptance decision, with the correct residual machinery otherwise.
    return right._replace(num_accepted=wrong.num_accepted)


def argmax_draft(probs, uniforms):
    """Wrong `draft_sample_fn`: drafts are the argmax but are scored as if sampled."""
    del uniforms
    return tf.argmax(probs, axis=-1, output_type=tf.int32)


class ForgetfulCache(WrappedModel):
    """Wrong target: its cache keeps only the FIRST entry of every window it decodes.

    The logits of each window are right (the whole window is decoded on the incoming
    cache), but the cache handed back is the incoming one with only ids[:, 0] written, as
    if the loop's commit step kept the verify pass's entry for out[n] and dropped those of
    the accepted drafts d_1 .. d_a (or a rollback cut the cache back too far). The next
    round then attends to stale slots where the accepted drafts should be.

    Only models that read more than the column just written can see this: an order-2
    NGram reads just that column, so its outputs are unchanged; an order-3 NGram or a T5
    decoder is not. Built on the `DecodeModel` protocol alone, so it does not depend on
    any model's cache layout.
    """

    # Its `decode` takes no `live_width` (protocol.py's `LiveWidth`), whatever the model's.
    decodes_live_width = False

    def decode(self, context, cache, ids, positions):
        logits, _ = self._model.decode(context, cache, ids, positions)
        _, kept = self._model.decode(context, cache, ids[:, :1], positions[:, :1])
        return logits, kept
