"""Sends this process a stop signal while a given module is being imported, for tests of signals at start-up.

    import tests.signal_at_import as hook; hook.arm("backports_abc", signal.SIGINT)

The signal goes out from the import system's search for the module, so Python raises its handler's
exception inside that import, exactly where a real Ctrl-C at that moment lands. `backports_abc` is what
`import ray._raylet` probes from Cython with the error cleared, so a KeyboardInterrupt raised there is
swallowed (sweep.signal_latch).
"""

from __future__ import annotations

import importlib.abc
import os
import sys


class _SignalAtImport(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, signum: int):
        self.module, self.signum, self.fired = module, signum, False

    def find_spec(self, name, path, target=None):  # noqa: ANN001 (importlib's signature)
        if name == self.module and not self.fired:
            self.fired = True
            print(f"signal_at_import: sending {self.signum} while importing {name}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), self.signum)  # its handler runs here, inside the import of `name`
        return None  # the normal finders go on


def arm(module: str, signum: int) -> None:
    sys.meta_path.insert(0, _SignalAtImport(module, signum))
