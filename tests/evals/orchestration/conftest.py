"""The pipeline tests' tiny model pair, shared with the orchestration tests (one per session)."""

from tests.pipelines.conftest import humaneval_examples, pair  # noqa: F401  (fixtures)
