"""`WrappedModel`: a `DecodeModel` that is another one, with some calls changed.

Tests and benchmarks alter one behaviour of a real model (what its cache keeps, whether it
declares an extension of `tfspec/models/protocol.py`) and leave the rest as it is: a
subclass overrides `decode` (or sets a class attribute), and everything else, from
`vocab_size` to `prepare`, is the wrapped model's.
"""


class WrappedModel:
    """Forwards `prepare` and every attribute it does not define to `model`."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        # vocab_size, eos_id, pad_id, decoder_start_id, max_prompt_length, ...
        if name == "_model":  # Not set yet (e.g. during copying): no recursion.
            raise AttributeError(name)
        return getattr(self._model, name)

    def prepare(self, prompt_ids, prompt_lengths, max_length, **kwargs):
        # kwargs: the extensions' arguments (`window` of protocol.py's `WindowedCache`).
        return self._model.prepare(prompt_ids, prompt_lengths, max_length, **kwargs)
