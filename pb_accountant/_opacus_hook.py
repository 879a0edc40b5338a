"""Registers "pb" with Opacus without importing torch at ``import pb_accountant`` time.

If opacus.accountants is already imported we register at once; otherwise a meta-path
finder waits for its first import and registers right after it has executed.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_TARGET = "opacus.accountants"


def register(module=None) -> bool:
    """Register the accountant with an imported ``opacus.accountants``; True on success."""
    from .accountant import MECHANISM, PrivacyBucketsAccountant

    module = module or sys.modules.get(_TARGET)
    if module is None:
        return False
    iaccountant = getattr(module, "IAccountant", None)
    if iaccountant is not None and not issubclass(PrivacyBucketsAccountant, iaccountant):
        iaccountant.register(PrivacyBucketsAccountant)
    registry = sys.modules.get(_TARGET + ".registry")
    table = getattr(registry, "_ACCOUNTANTS", None)
    if table is not None:
        table[MECHANISM] = PrivacyBucketsAccountant
    elif hasattr(module, "register_accountant"):
        module.register_accountant(MECHANISM, PrivacyBucketsAccountant, force=True)
    return True


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                register(module)
            finally:
                uninstall()

        loader.exec_module = exec_module
        return spec


_finder = _RegisterOnImport()


def uninstall() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def install() -> None:
    """Register now if opacus is loaded, else on its first import."""
    if _TARGET in sys.modules:
        register()
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
