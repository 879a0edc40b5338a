"""Training-time integrations of pb-accountant: budget tracking, a budget guard,
framework callbacks (PyTorch Lightning, Hugging Face transformers) and a command line.

Imports are lazy: ``import pb_accountant.integrations`` (and ``pb_accountant.integrations.cli``) needs neither torch
nor opacus, lightning or transformers; the callbacks live in ``pb_accountant.integrations.lightning``
and ``pb_accountant.integrations.huggingface`` and import their framework there.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "BudgetTracker": "tracker",
    "BudgetRecord": "sinks",
    "LoggingSink": "sinks",
    "CSVSink": "sinks",
    "JSONLinesSink": "sinks",
    "TensorBoardSink": "sinks",
    "CallbackSink": "sinks",
    "BudgetGuard": "guard",
    "BudgetExceededError": "guard",
    "BudgetStateError": "_common",
    "SinkError": "tracker",
    "SinkErrorWarning": "tracker",
    "check_sample_rate": "sampling",
    "SampleRateWarning": "sampling",
    "SamplerMismatchWarning": "sampling",
    "privacy_report": "report",
    "loader_sampling": "sampling",
    "sampler_check": "sampling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pb_accountant.integrations' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
