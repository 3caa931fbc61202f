"""fabnb: a notebook-first research kit for adaptive RAG benchmarking.

The package follows the FAB-Bench pipeline (arXiv 2605.26476), one subpackage per layer; the
map of modules is in the documentation (``docs/package.md``) and in :data:`_SUBMODULES`
below, which ``tests/test_readme.py`` checks against the package and the docs.

``import fabnb`` is light: submodules and their heavy dependencies (statsmodels,
matplotlib, deepeval, openai) load when used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("core", "corpus", "data", "models", "qa", "rag", "judge", "tester", "analysis", "experiment", "views",
               "jupyter", "cli")


from .core.errors import CausedError, FabnbError  # noqa: E402 - light: no third-party import

__all__ = ["CausedError", "FabnbError", "__version__", *_SUBMODULES]


def _jupyter_server_extension_points() -> list[dict]:
    # Jupyter finds the server extension here (jupyter_server_config.d/fabnb.json enables "fabnb").
    from .jupyter import server_extension_points

    return server_extension_points()


def _jupyter_labextension_paths() -> list[dict]:
    from .jupyter import labextension_paths

    return labextension_paths()


def load_ipython_extension(ipython) -> None:
    """``%load_ext fabnb``: the ``%fabnb`` magics (:mod:`fabnb.jupyter.magics`)."""
    from .jupyter.magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str):
    # Lazy submodules: `fabnb.analysis.curves` works after a bare `import fabnb` without paying for it up front.
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'fabnb' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
