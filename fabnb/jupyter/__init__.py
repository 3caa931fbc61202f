"""fabnb inside Jupyter: the ``%fabnb`` magics, the server extension and the JupyterLab extension's data.

- :mod:`~fabnb.jupyter.magics`: ``%load_ext fabnb``, ``%fabnb`` and ``%%fabnb``;
- :mod:`~fabnb.jupyter.api`: what the server's routes answer, as plain functions (every decision is here);
- :mod:`~fabnb.jupyter.jobs`: the runs the server starts and stops;
- :mod:`~fabnb.jupyter.server`: the server extension (``/fabnb/api/``), enabled on install.

The JupyterLab extension (``labextension/`` in the repository, built into ``fabnb/jupyter/labextension``)
is a view over these routes. ``import fabnb.jupyter`` imports neither Jupyter nor pandas.
"""

from __future__ import annotations

__all__ = ["LABEXTENSION", "labextension_paths", "server_extension_points"]

#: The JupyterLab extension's name (its package.json) and its folder in ``share/jupyter/labextensions``.
LABEXTENSION = "fabnb-jupyterlab"


def server_extension_points() -> list[dict]:
    """What ``fabnb._jupyter_server_extension_points`` gives Jupyter: the server extension's app."""
    from .server import FabnbExtension

    return [{"module": "fabnb.jupyter.server", "app": FabnbExtension}]


def labextension_paths() -> list[dict]:
    """Where the prebuilt JupyterLab extension is (``jupyter labextension develop`` reads it)."""
    return [{"src": "jupyter/labextension", "dest": LABEXTENSION}]
