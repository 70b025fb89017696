"""Tests of recipes.tiny_code.extraction: docstring summaries (the layout of extracted
functions is tested on a small package tree in test_corpus.py)."""

import pytest

from recipes.tiny_code import extraction


@pytest.mark.parametrize("doc,expected", [
    ("Return the thing.  More words here.", "Return the thing."),
    ("\n    Split a string,\n    e.g. 'a b', into words.\n\n    Details.",
     "Split a string, e.g. 'a b', into words."),
    ("Call :func:`os.path.join` on ``parts``. Then stop.", "Call os.path.join on `parts`."),
    ("Version 2.0 is parsed here! Next.", "Version 2.0 is parsed here!"),
    ("No final period", "No final period"),
])
def test_first_sentence(doc, expected):
    assert extraction.first_sentence(doc) == expected
