"""Example scripts (examples/*.py) loaded as modules, for the tests of what they compute
and of the pages that quote them."""
import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    """examples/<name>.py as a module, run with examples/ on ``sys.path`` (as when the
    script itself is run) so that its helper modules (``_repro``, ...) import."""
    name = name[:-3] if name.endswith(".py") else name
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module
