"""What tests of tfspec, and of code built on it, share (as `seqio.test_utils` does for seqio).

- `generate_with_rules`: `tfspec.generate` with the acceptance rule or the draft sampler
  replaced; the only way to reach the loop with other rules (the public `generate` has no
  such hooks).
- `wrong_rules`: deliberately wrong rules and models, for the power checks of statistical
  tests (a test that passes the real loop must reject these).
- `wrapped_model`: `WrappedModel`, a model that is another one with some calls changed.
- `exact_reference`: exact distributions of enumerable targets (NGram, tiny T5) and the
  G-test, in numpy, independent of tfspec's TensorFlow code.
"""

from tfspec.testing.rules import generate_with_rules

__all__ = ["generate_with_rules"]
