"""streamssvm: streaming / online learning of structural SVMs with duality-gap certificates."""


def _map_source_connectors():
    """In a source checkout, load the top-level ``connectors/`` folder as
    ``streamssvm.connectors`` (installed wheels carry it inside the package, see
    ``pyproject.toml``). Registered eagerly so that no other import hook (e.g. an editable
    install of another checkout) can supply a different copy."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, "connectors")) or "streamssvm.connectors" in sys.modules:
        return
    src = os.path.join(os.path.dirname(here), "connectors")
    init = os.path.join(src, "__init__.py")
    if not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location(__name__ + ".connectors", init, submodule_search_locations=[src])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[spec.name]
        raise
    globals()["connectors"] = mod


_map_source_connectors()
del _map_source_connectors

__version__ = "0.1.0"

# Lazy attributes (PEP 562): ``import streamssvm`` stays cheap -- numba and the kernel modules
# load at the first use of an estimator, learner or structure -- so that the command line can
# say what it is doing (e.g. that it is compiling the kernels) before that import.
_LAZY = {"Certificate": ".certificate", "Constraints": ".constraints", "ExtremeClassifier": ".estimators", "GraphSegmenter": ".estimators",
         "MulticlassSSVM": ".estimators",
         "MultiLabelSSVM": ".estimators", "SequenceTagger": ".estimators", "load": ".estimators",
         "datasets": None, "learners": None, "structures": None}

__all__ = ["Certificate", "Constraints", "ExtremeClassifier", "GraphSegmenter", "MulticlassSSVM", "MultiLabelSSVM", "SequenceTagger", "datasets",
           "learners", "load", "structures", "__version__"]


def __getattr__(name):
    """Import what ``name`` needs at its first use.

    >>> import streamssvm as ss
    >>> ss.MulticlassSSVM.__name__, ss.learners.BCFW.__name__, callable(ss.load)
    ('MulticlassSSVM', 'BCFW', True)
    """
    import importlib
    import importlib.util
    if name not in _LAZY:
        # any submodule (``streamssvm.estimators``, ``streamssvm.engine``, ...) as an attribute,
        # as when the package imported them eagerly
        if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module("." + name, __name__)
    where = _LAZY[name]
    if where is None:
        value = importlib.import_module("." + name, __name__)
    else:
        value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
