"""seglake.

``seglake.open(root)`` opens a lake for notebooks (:mod:`seglake.api`); it is imported on
first use, so ``import seglake`` pulls in neither pyspark nor matplotlib (nor deltalake).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seglake.api import Lake, Partition, open

__all__ = ["Lake", "Partition", "open"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from seglake import api

        return getattr(api, name)
    raise AttributeError(f"module 'seglake' has no attribute {name!r}")
