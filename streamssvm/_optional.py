"""Optional dependencies: one guarded import that names the extra to install.

The core (numpy, numba, river, scipy) covers file-based learning; Kafka, approximate MIPS
(hnswlib), plots (matplotlib) and DataFrame outputs (pandas) are extras. A feature that needs
one imports it through :func:`require`, so a missing package is an ``ImportError`` saying
which ``pip install 'streamssvm[...]'`` provides it.

>>> require("math", extra="none", feature="this doctest").__name__
'math'
>>> require("no_such_package_xyz", extra="extreme", feature="mips='hnsw'")
Traceback (most recent call last):
...
ImportError: mips='hnsw' needs no_such_package_xyz: pip install 'streamssvm[extreme]'
"""
from __future__ import annotations

import importlib

# import name -> (distribution, extra); documentation for users and for the packaging test
EXTRAS = {
    "kafka": ("kafka-python", "kafka"),
    "hnswlib": ("hnswlib", "extreme"),
    "matplotlib": ("matplotlib", "plot"),
    "pandas": ("pandas", "pandas"),
    "ray": ("ray", "distributed"),
    "maxflow": ("PyMaxflow", "graph"),
    "skimage": ("scikit-image", "graph"),
}


def available(module: str) -> bool:
    """Whether the optional ``module`` can be imported (without importing it)."""
    import importlib.util
    return importlib.util.find_spec(module) is not None


def require(module: str, *, extra: str, feature: str):
    """Import and return ``module``; when it is missing, raise an ``ImportError`` naming
    ``feature`` (what the user asked for) and the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name != top and not module.startswith(e.name + "."):
            raise  # the package is there but one of *its* dependencies is broken: keep the real error
        dist = EXTRAS.get(top, (top,))[0]
        raise ImportError(f"{feature} needs {dist}: pip install 'streamssvm[{extra}]'") from None


__all__ = ["available", "require", "EXTRAS"]
