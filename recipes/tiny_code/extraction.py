"""Extracting documented Python functions from source files, in HumanEval's shape.

The first step of the tiny-code corpus (`recipes.tiny_code.corpus` filters, decontaminates,
splits and caches what this module extracts). Every function or method with a docstring on
lines of its own and a non-trivial body becomes a `Candidate` with two views:

- completion: `prompt` is the module's relevant imports, the signature line(s) and the
  docstring, dedented to top level and ending with the newline after the docstring;
  `completion` is the rest of the body, dedented the same way, so that
  `prompt + completion` parses as a top-level Python function. For example:

      from os import path


      def exists_all(*names):
          \"\"\"Returns True if every name exists.\"\"\"
      ----------------------------------------------- prompt ends, completion starts
          return all(path.exists(n) for n in names)

- docsum: `code` is the whole function without its docstring; the summary is the
  docstring's first sentence on one line (`first_sentence`, `summary_ok`).
"""

import ast
import dataclasses
import hashlib
import io
import os
import re
import sysconfig
import tokenize
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

# Directory names never descended into. `test`/`tests` also covers lib2to3/tests, ctypes/test,
# unittest/test, distutils/tests and sqlite3/test.
SKIP_DIRS = frozenset({
    "test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__",
    "lib-dynload", "ensurepip", "pydoc_data",
})


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
class Candidate:
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
                      stats: Optional[Dict[str, int]] = None) -> List[Candidate]:
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
        out.append(Candidate(id=item_id, module=module, name=node.name, prompt=prompt,
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


def summary_ok(summary: str, config) -> bool:
    """Whether a summary is a usable one-sentence target (`config`: a `CorpusConfig`)."""
    if (not summary or len(summary.split()) < config.min_summary_words
            or len(summary) > config.max_summary_chars):
        return False
    if ">>>" in summary or _SIGNATURE_LINE.match(summary) or not summary[0].isalnum():
        return False
    if summary.endswith((":", ",", ";", "-")):  # an introduction to a list, not a sentence
        return False
    return summary.isascii()
