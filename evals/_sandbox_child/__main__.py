"""Entry point of the sandbox's checker: `python -I evals/_sandbox_child RESULT_FD TAG`.

`-I` puts neither the repository nor this folder on `sys.path`, and the sandbox must not
depend on anything but the standard library, so this script loads its sibling modules as
the package `tfspec_sandbox_child` straight from this folder; `sys.path` is left as it is.
"""

import importlib.util
import os
import sys


def _load_package():
    folder = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "tfspec_sandbox_child", os.path.join(folder, "__init__.py"),
        submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return package


if __name__ == "__main__":
    _load_package()
    from tfspec_sandbox_child import checker  # pylint: disable=import-error

    sys.exit(checker.main(sys.argv))
