"""The tiny-code recipe's data: the corpus, the shipped tokenizer and tokenized examples."""

import importlib.util
import os

from recipes.tiny_code import corpus as corpus_lib
from recipes.tiny_code import extraction
from tfspec import tokenizer as tokenizer_lib
from tfspec.training import examples as examples_lib
from tfspec.training import stages


def package_root(name: str) -> str:
    """The source directory of an installed Python package (e.g. "numpy")."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"Package {name!r} (a corpus source in the config) is not "
                                "installed; install it or remove it from "
                                "data.extra_packages.")
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def load_data(config) -> stages.Data:
    """Builds (or loads from cache) the corpus of `config.data` and tokenizes both splits."""
    data = config.data
    extra = tuple(package_root(p) for p in data.extra_packages)
    corpus = corpus_lib.build_corpus(seed=data.corpus_seed, extra_roots=extra)
    tokenizer = tokenizer_lib.load_tokenizer(stages.tokenizer_path(config))
    kwargs = dict(tasks=tuple(data.tasks), max_encoder_length=data.max_encoder_length,
                  max_target_length=data.max_target_length)
    train = examples_lib.make_examples(corpus, tokenizer, "train", limit=data.get("limit"),
                                       **kwargs)
    validation = examples_lib.make_examples(corpus, tokenizer, "validation",
                                            limit=data.get("validation_limit"), **kwargs)
    roots = tuple(corpus.manifest.get("config", {}).get("roots", ())) or (
        extraction.default_roots() + extra)
    return stages.Data(tokenizer, corpus, train, validation, roots)
