"""Benchmark scripts (benchmarks/*.py) loaded as modules, for the tests of the figures
the docs cite from them."""
import importlib.util
import os

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks")


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
