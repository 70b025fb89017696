"""Test-wide setup: quiet TensorFlow, two logical CPU devices for MirroredStrategy tests."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402  (environment must be set first)

# Logical devices can only be configured before the runtime initialises, so this runs at
# collection time, once per test process.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # Runtime already initialised by an earlier import: keep what exists.
    pass


def pytest_addoption(parser):
    parser.addoption("--tpu", action="store", default=None,
                     help="Run the TPU matrix against this TPU name ('local' on a TPU VM).")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (CI runs it; deselect locally with -m 'not slow')")
    config.addinivalue_line("markers", "tpu: needs a TPU, run with --tpu NAME")
