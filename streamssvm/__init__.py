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

from . import datasets, learners, structures  # noqa: E402
from .certificate import Certificate  # noqa: E402
from .estimators import ExtremeClassifier, MulticlassSSVM, MultiLabelSSVM, SequenceTagger, load  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Certificate", "ExtremeClassifier", "MulticlassSSVM", "MultiLabelSSVM", "SequenceTagger", "datasets",
           "learners", "load", "structures", "__version__"]
