"""The tiny-code corpus: mined, decontaminated, split and cached (`build_corpus`).

Every machine that runs Python has its standard library on disk, so it is the one source of
real code that needs no network. `build_corpus` mines it (and any extra roots) with
`recipes.tiny_code.extraction`, drops overlong, non-ASCII and unparsable items, removes
anything that looks like a HumanEval problem (`recipes.tiny_code.decontamination`; the
report is kept in the manifest), deduplicates by a hash of the body's AST and splits by a
hash of `(seed, id)`, so an item never changes split when the corpus grows. Two kinds of
examples, both in HumanEval's shape:

- **completion** (`id, prompt, completion`): signature + docstring -> body.
- **docsum** (`id, code, summary`): the function without its docstring -> the docstring's
  first sentence.

The built corpus is cached as JSONL under
`$TFSPEC_CACHE/code_corpus/py<X.Y.Z>-<config hash>/` (default `~/.cache/tfspec`).

Usage:

    corpus = build_corpus()                      # standard library, seed 0, cached
    corpus.completion("train")[0]                # {"id", "prompt", "completion"}
    corpus.docsum("validation")[0]               # {"id", "code", "summary"}
    corpus.manifest["counts"]

Command line (prints the manifest): `python -m recipes.tiny_code.corpus [--root DIR]`.
"""

import argparse
import ast
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from recipes.tiny_code import decontamination
from recipes.tiny_code import extraction

# Bump when the extraction rules change, so that old caches are not reused.
FORMAT_VERSION = 1

SPLITS = ("train", "validation")


_COMPLETION_FILES = {split: f"completion_{split}.jsonl" for split in SPLITS}
_DOCSUM_FILES = {split: f"docsum_{split}.jsonl" for split in SPLITS}
_MANIFEST_FILE = "manifest.json"


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """Everything that decides the content of a corpus (its hash names the cache directory).

    Attributes:
      roots: source directories to mine; module names are paths relative to each root.
      seed: seeds the train/validation split.
      validation_fraction: share of ids that go to the validation split.
      max_prompt_chars: longest prompt (imports + signature + docstring) kept.
      max_completion_chars: longest completion (body after the docstring) kept.
      max_completion_lines: most lines in a completion.
      max_non_ascii_fraction: items whose text has a larger share of non-ASCII characters are
        dropped.
      min_summary_words: shortest docsum summary kept, in words.
      max_summary_chars: longest docsum summary kept.
      exclude_humaneval: drop items that match a HumanEval problem (see `decontamination`).
      shingle_size: token n-gram length for the HumanEval overlap rule.
    """

    roots: Tuple[str, ...]
    seed: int = 0
    validation_fraction: float = 0.05
    max_prompt_chars: int = 2000
    max_completion_chars: int = 2000
    max_completion_lines: int = 50
    max_non_ascii_fraction: float = 0.01
    min_summary_words: int = 3
    max_summary_chars: int = 300
    exclude_humaneval: bool = True
    shingle_size: int = 10





def split_of(item_id: str, seed: int = 0, validation_fraction: float = 0.05) -> str:
    """The split of an id: a hash of `(seed, id)`, so it never changes as the corpus grows."""
    digest = hashlib.sha256(f"{seed}:{item_id}".encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    return "validation" if u < validation_fraction else "train"


def _non_ascii_fraction(text: str) -> float:
    return sum(1 for c in text if ord(c) > 127) / max(1, len(text))


def _fingerprint(roots: Sequence[str]) -> List[Tuple[str, str, int]]:
    """(root, relative path, size) of every file that would be read: part of the cache key."""
    out = []
    for root in roots:
        for path, _ in extraction.iter_source_files(root):
            out.append((root, os.path.relpath(path, root), os.path.getsize(path)))
    return out


def default_cache_root() -> str:
    """`$TFSPEC_CACHE/code_corpus`, or `~/.cache/tfspec/code_corpus`."""
    base = os.environ.get("TFSPEC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "tfspec")
    return os.path.join(base, "code_corpus")


def _code_sha() -> str:
    """Hash of the recipe's corpus code: a change to the rules invalidates caches."""
    digest = hashlib.sha256()
    for module in (extraction, decontamination, sys.modules[__name__]):
        with open(module.__file__, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _config_key(config: CorpusConfig, humaneval_sha: Optional[str]) -> str:
    payload = json.dumps({
        "format_version": FORMAT_VERSION,
        "code_sha256": _code_sha(),
        "config": dataclasses.asdict(config),
        "files": _fingerprint(config.roots),
        "humaneval_sha256": humaneval_sha,
    }, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _collect(config: CorpusConfig, matcher: Optional[decontamination.HumanEvalMatcher]):
    """Extracts, filters, excludes, deduplicates and splits.

    Returns:
      `(completion, docsum, info)`: rows per split for each kind, and manifest statistics.
    """
    stats: Dict[str, int] = {}
    files = {"scanned": 0, "failed": 0}
    candidates = []
    for root in config.roots:
        for path, module in extraction.iter_source_files(root):
            files["scanned"] += 1
            source = extraction.read_source(path)
            if source is None:
                files["failed"] += 1
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    candidates.extend(extraction.extract_functions(
                        source, module, os.path.basename(path) == "__init__.py", stats))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                files["failed"] += 1

    kept = []
    checked = 0
    excluded = []
    by_rule: Dict[str, List[str]] = {"entry_point": [], "shingle": []}
    details: Dict[str, Dict[str, str]] = {}
    seen_hashes: Set[str] = set()
    seen_ids: Set[str] = set()

    def skip(reason):
        stats[reason] = stats.get(reason, 0) + 1

    for c in candidates:
        if len(c.prompt) > config.max_prompt_chars:
            skip("prompt_too_long")
            continue
        if (len(c.completion) > config.max_completion_chars
                or c.completion.count("\n") > config.max_completion_lines):
            skip("completion_too_long")
            continue
        if _non_ascii_fraction(c.prompt + c.completion) > config.max_non_ascii_fraction:
            skip("non_ascii")
            continue
        try:
            ast.parse(c.prompt + c.completion)
            ast.parse(c.code)
        except (SyntaxError, ValueError):
            skip("does_not_parse")
            continue
        if matcher is not None:
            checked += 1
            found = matcher.match(c.name, c.prompt + c.completion)
            if found:
                excluded.append(c.id)
                by_rule[found["rule"]].append(c.id)
                details[c.id] = found
                continue
        if c.body_hash in seen_hashes:
            skip("duplicate_body")
            continue
        if c.id in seen_ids:  # same module name under two roots
            skip("duplicate_id")
            continue
        seen_hashes.add(c.body_hash)
        seen_ids.add(c.id)
        kept.append(c)

    completion = {s: [] for s in SPLITS}
    docsum = {s: [] for s in SPLITS}
    for c in kept:
        split = split_of(c.id, config.seed, config.validation_fraction)
        completion[split].append({"id": c.id, "prompt": c.prompt, "completion": c.completion})
        summary = extraction.first_sentence(c.docstring)
        if extraction.summary_ok(summary, config):
            docsum[split].append({"id": c.id, "code": c.code, "summary": summary})
        else:
            skip("docsum_bad_summary")

    exclusion = {
        "checked": checked,
        "excluded": excluded,
        "method": (f"excluded if the function name equals a HumanEval entry point, or if "
                   f"prompt+completion shares a {config.shingle_size}-token shingle (lower-cased "
                   "identifiers/numbers/punctuation) with a HumanEval prompt or canonical "
                   "solution" if matcher is not None else "disabled"),
        "by_rule": by_rule,
        "details": details,
    }
    return completion, docsum, {"files": files, "skipped": dict(sorted(stats.items())),
                                "candidates": len(candidates), "exclusion": exclusion}


def _write_jsonl(path: str, rows: Iterable[Dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def _read_jsonl(path: str) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class CodeCorpus:
    """A built corpus in its cache directory (JSONL files plus `manifest.json`)."""

    def __init__(self, directory: str):
        self.directory = directory
        with open(os.path.join(directory, _MANIFEST_FILE), encoding="utf-8") as f:
            self._manifest = json.load(f)
        self._cache: Dict[str, List[Dict[str, Any]]] = {}

    def _load(self, filename: str) -> List[Dict[str, Any]]:
        if filename not in self._cache:
            self._cache[filename] = _read_jsonl(os.path.join(self.directory, filename))
        return self._cache[filename]

    @staticmethod
    def _check_split(split: str) -> None:
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")

    def completion(self, split: str) -> List[Dict[str, str]]:
        """Completion pairs of a split: dicts with `id, prompt, completion`, sorted by id."""
        self._check_split(split)
        return list(self._load(_COMPLETION_FILES[split]))

    def docsum(self, split: str) -> List[Dict[str, str]]:
        """Summarisation pairs of a split: dicts with `id, code, summary`, sorted by id."""
        self._check_split(split)
        return list(self._load(_DOCSUM_FILES[split]))

    @property
    def manifest(self) -> Dict[str, Any]:
        """Counts, sizes, config, python version, seed and the HumanEval exclusion report."""
        return self._manifest

    def text_for_tokenizer(self) -> Iterator[str]:
        """Training text for a tokenizer, train split only.

        Yields `prompt + completion` of every train completion pair, then every train docsum
        summary (docsum code is already covered by the completion text).
        """
        for row in self.completion("train"):
            yield row["prompt"] + row["completion"]
        for row in self.docsum("train"):
            yield row["summary"]

    def __repr__(self) -> str:
        counts = self._manifest["counts"]
        return f"CodeCorpus({self.directory!r}, counts={counts})"


def build_corpus(roots: Optional[Sequence[str]] = None, seed: int = 0,
                 cache_dir: Optional[str] = None, *, extra_roots: Sequence[str] = (),
                 rebuild: bool = False, **config_kwargs) -> CodeCorpus:
    """Builds (or loads from cache) the code corpus.

    Args:
      roots: source directories to mine; default: the running interpreter's standard library.
      seed: split seed.
      cache_dir: parent directory of the cache entries; default `default_cache_root()`
        (`$TFSPEC_CACHE/code_corpus` or `~/.cache/tfspec/code_corpus`). The corpus is stored in
        `<cache_dir>/py<X.Y.Z>-<hash of the config and of the file list>/`.
      extra_roots: more directories, mined after `roots` (e.g. the standard library plus a
        project's own source).
      rebuild: build even if a cached copy exists.
      **config_kwargs: other `CorpusConfig` fields (caps, `validation_fraction`,
        `exclude_humaneval`, `shingle_size`, ...).

    Returns:
      The corpus.

    Raises:
      FileNotFoundError: a root does not exist, or HumanEval data is missing while
        `exclude_humaneval` is on.
    """
    roots = tuple(roots) if roots is not None else extraction.default_roots()
    roots = tuple(os.path.realpath(r) for r in tuple(roots) + tuple(extra_roots))
    for root in roots:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"Corpus root {root} is not a directory.")
    config = CorpusConfig(roots=roots, seed=seed, **config_kwargs)

    problems, humaneval_sha, source = None, None, None
    if config.exclude_humaneval:
        source = decontamination.humaneval_path()
        with open(source, "rb") as f:
            humaneval_sha = hashlib.sha256(f.read()).hexdigest()

    version = "py{}.{}.{}".format(*sys.version_info[:3])
    directory = os.path.join(cache_dir or default_cache_root(),
                             f"{version}-{_config_key(config, humaneval_sha)}")
    if os.path.exists(os.path.join(directory, _MANIFEST_FILE)) and not rebuild:
        return CodeCorpus(directory)

    matcher = None
    if config.exclude_humaneval:
        problems = decontamination.read_humaneval(source)
        matcher = decontamination.HumanEvalMatcher(problems, config.shingle_size)
    completion, docsum, info = _collect(config, matcher)
    info["exclusion"]["humaneval_source"] = source
    info["exclusion"]["humaneval_problems"] = len(problems) if problems is not None else 0

    def chars(rows, keys):
        return sum(len(r[k]) for r in rows for k in keys)

    manifest = {
        "format_version": FORMAT_VERSION,
        "python_version": sys.version.split()[0],
        "python_implementation": sys.implementation.name,
        "seed": seed,
        "config": dataclasses.asdict(config),
        "counts": {
            "completion": {s: len(completion[s]) for s in SPLITS},
            "docsum": {s: len(docsum[s]) for s in SPLITS},
        },
        "chars": {
            "completion": {s: chars(completion[s], ("prompt", "completion")) for s in SPLITS},
            "docsum": {s: chars(docsum[s], ("code", "summary")) for s in SPLITS},
        },
        "files": info["files"],
        "source_fingerprint": hashlib.sha256(
            json.dumps(_fingerprint(config.roots)).encode("utf-8")).hexdigest(),
        "candidates": info["candidates"],
        "skipped": info["skipped"],
        "humaneval_exclusion": info["exclusion"],
        "humaneval_sha256": humaneval_sha,
    }

    # Write into a temporary sibling, then rename, so a crash or a concurrent build never
    # leaves a half-written cache entry behind.
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=parent)
    try:
        for split in SPLITS:
            _write_jsonl(os.path.join(tmp, _COMPLETION_FILES[split]),
                         sorted(completion[split], key=lambda r: r["id"]))
            _write_jsonl(os.path.join(tmp, _DOCSUM_FILES[split]),
                         sorted(docsum[split], key=lambda r: r["id"]))
        manifest["sha256"] = {}
        for name in sorted(list(_COMPLETION_FILES.values()) + list(_DOCSUM_FILES.values())):
            with open(os.path.join(tmp, name), "rb") as f:
                manifest["sha256"][name] = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(tmp, _MANIFEST_FILE), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        if rebuild and os.path.exists(directory):
            shutil.rmtree(directory)
        try:
            os.rename(tmp, directory)
        except OSError:  # another process finished first; its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return CodeCorpus(directory)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Builds the corpus and prints its manifest (without the list of excluded ids)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", action="append", help="Source root (repeatable); "
                        "default: the standard library.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)
    corpus = build_corpus(args.root, seed=args.seed, cache_dir=args.cache_dir,
                          rebuild=args.rebuild)
    manifest = dict(corpus.manifest)
    report = dict(manifest["humaneval_exclusion"])
    report["excluded"] = len(report["excluded"])
    report["by_rule"] = {k: len(v) for k, v in report["by_rule"].items()}
    del report["details"]
    manifest["humaneval_exclusion"] = report
    print(corpus.directory)
    print(json.dumps(manifest, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
