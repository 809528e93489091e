"""Run a callback right after the job imports torch (``gputui run`` installs the
hook from sitecustomize, before the job's own ``import torch``), or a part of
torch that loads later (``torch._dynamo``, which the first optimizer or
``torch.compile`` imports)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from typing import Any


class TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Runs a callback right after ``import torch`` (or of the module ``name``)
    finishes.

    ``gputui run`` installs the hook from sitecustomize, before the job imports
    torch; importing torch ourselves would cost seconds in every Python process the
    job starts, so we wait for the job's own import instead."""

    def __init__(self, callback: Callable[[Any], None], name: str = "torch") -> None:
        self.callback = callback
        self.name = name
        self._busy = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _NotifyingLoader(spec.loader, self._loaded)
        return spec

    def _loaded(self, module: Any) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            self.callback(module)
        except Exception:
            pass


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, done: Callable[[Any], None]) -> None:
        self._loader = loader
        self._done = done

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        # Put the real loader back so nothing later sees our wrapper.
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        self._done(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
