"""VHD-Play corpus factory: solved mechanisms rendered as stateful tool environments.

`vf-eval vhd --env.taskset.path DIR …` runs an export with verifiers: verifiers 0.4 resolves a
taskset id to a module and takes the Taskset, Harness and Env classes it exports, so this package
exports vhd's (from `vhd.adapters.verifiers`), imported only when asked for: `import vhd` does
not import verifiers.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["VhdTaskset", "VhdHarness", "VhdEnv"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vhd.adapters import verifiers

        return getattr(verifiers, name)
    raise AttributeError(f"module 'vhd' has no attribute {name!r}")
