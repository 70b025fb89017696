"""The package version: the single source read by `tfspec.__version__` and setup.py."""

__version__ = "0.1.0"
