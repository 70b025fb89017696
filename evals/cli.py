"""The command-line convention of every entry point: argparse, one way.

    parser = cli.ArgumentParser("python -m bench.speedup", __doc__)
    parser.add_argument("--k", default="1,2,4", help="comma-separated draft lengths")
    cli.add_bool(parser, "resume", False, "continue the run in --output_dir")
    args = parser.parse_args(argv)

What every `python -m evals.*` / `python -m bench.*` program (and `tfspec-eval`) does alike:

- `-h` and `--help` print the help and exit 0; the help shows each flag's default.
- A bad flag or value prints one line, `PROG: error: MESSAGE (see --help)`, on stderr and
  exits with status 2 (no usage dump, no traceback).
- Flags are spelled `--name value` or `--name=value`, never abbreviated (a prefix of a flag is
  an unknown flag, so Beam's options can pass through `evals.run` unchanged).
- Boolean flags keep the spellings of absl, which `evals.run` used before: `--name`,
  `--noname`, `--name=true|false` (also `--no-name`).
- `--verbose` shows TensorFlow's native logs, which `tfspec.quiet` hides otherwise (the same
  as `TFSPEC_VERBOSE=1`).

This module imports neither TensorFlow nor Beam, so bad flags are reported at once.
"""

import argparse
import sys
from typing import Any, Dict, Optional, Sequence

EXIT_USAGE = 2
_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends "(default: X)" to every flag's help
    (except when the default is None or empty, where the help text says what happens)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or not action.option_strings
                or default is None or default is argparse.SUPPRESS or default == ""
                or isinstance(action, argparse._HelpAction)):  # pylint: disable=protected-access
            return text
        return f"{text} (default: %(default)s)".strip()


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the conventions of the module docstring (and a --verbose flag)."""

    def __init__(self, prog: str, description: Optional[str] = None, verbose: bool = True,
                 error_name: Optional[str] = None, **kwargs):
        """`prog` names the program in the usage line, `error_name` (default `prog`) in
        error lines; `verbose` adds --verbose."""
        self.error_name = error_name or prog
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(prog=prog, description=description, **kwargs)
        if verbose:
            self.add_argument("--verbose", action="store_true",
                              help="show TensorFlow's native (C++) logs, hidden by default "
                                   "(same as TFSPEC_VERBOSE=1)")

    def add_argument(self, *args, **kwargs):
        # A flag without help text still shows its default.
        if "help" not in kwargs and kwargs.get("default") not in (None, ""):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        """One line on stderr, exit status 2."""
        self.exit(EXIT_USAGE, f"{self.error_name}: error: {message} (see --help)\n")


def parse_bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_bool(parser: argparse.ArgumentParser, name: str, default: bool,
             help: str) -> None:  # pylint: disable=redefined-builtin
    """A boolean flag spelled `--name`, `--name=true|false`, `--noname` or `--no-name`."""
    parser.add_argument(f"--{name}", nargs="?", const=True, default=default, type=parse_bool,
                        metavar="true|false", help=help)
    parser.add_argument(f"--no{name}", f"--no-{name}", dest=name, action="store_false",
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def explicit_values(parser: argparse.ArgumentParser,
                    argv: Sequence[str]) -> Dict[str, Any]:
    """The flags given on the command line (by dest), without the parser's defaults."""
    actions = parser._actions  # pylint: disable=protected-access
    saved = [(action, action.default) for action in actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        namespace, _ = parser.parse_known_args(list(argv))
    finally:
        for action, default in saved:
            action.default = default
    return vars(namespace)


def usage_error(prog: str, message: Any) -> int:
    """Prints `PROG: error: MESSAGE` and returns the usage exit status (2)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE
