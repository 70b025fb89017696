"""Tests of tfspec.training.optim: warm-up/decay schedules and the AdamW setup."""

import pytest

from tfspec.models import T5, T5Config
from tfspec.training import optim

from tests.tfspec.training.tiny_data import TINY_T5


@pytest.mark.parametrize("decay", optim.DECAYS)
def test_schedule_warms_up_linearly_to_the_peak(decay):
    schedule = optim.WarmupDecay(1e-3, warmup_steps=10, decay=decay, total_steps=100,
                                 final_fraction=0.1)
    assert float(schedule(0)) == pytest.approx(1e-4)
    assert float(schedule(4)) == pytest.approx(5e-4)
    assert float(schedule(9)) == pytest.approx(1e-3)
    late = float(schedule(99))
    expected = {"rsqrt": 1e-3 * (10 / 100) ** 0.5, "cosine": 1e-4, "constant": 1e-3}[decay]
    assert late == pytest.approx(expected, rel=1e-4)


def test_schedule_validates_its_arguments():
    with pytest.raises(ValueError, match="decay"):
        optim.WarmupDecay(1e-3, 10, decay="linear")
    with pytest.raises(ValueError, match="total_steps"):
        optim.WarmupDecay(1e-3, 10, decay="cosine", total_steps=5)


def test_weight_decay_skips_norms_and_position_biases():
    model = T5(T5Config(**TINY_T5), seed=0)
    optimizer = optim.make_optimizer(model, 1e-3, 10, weight_decay=0.1)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert "t5/shared" in decayed and "t5/lm_head" in decayed
    assert not any("norm" in p or "relative_attention_bias" in p for p in decayed)
    assert len(optimizer.variables) > len(model.trainable_variables)  # Built: moments exist.
