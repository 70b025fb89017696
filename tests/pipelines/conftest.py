"""Fixtures shared by the pipeline tests: one tiny model pair per test session.

Sharing the pair (and so the loaded models, which `pipelines.generation.load_models` caches
per process) lets the tests reuse each other's compiled XLA programs.
"""

import pytest

from evals import humaneval
from tests.pipelines import tiny_models


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    return tiny_models.make_pair(str(tmp_path_factory.mktemp("pair")))


@pytest.fixture(scope="session")
def humaneval_examples():
    return humaneval.load(limit=2)
