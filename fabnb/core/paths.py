"""Where fabnb keeps things on this machine: the user cache (the FAB-Bench release, the LLM response cache).

Light on purpose (``os`` and ``pathlib`` only): the LLM client and the dataset loader both
read it, and neither should load the other.

Examples
--------
>>> import os
>>> os.environ["FABNB_CACHE_DIR"] = "/tmp/fabnb-cache"
>>> cache_dir(), llm_cache_path()
(PosixPath('/tmp/fabnb-cache'), PosixPath('/tmp/fabnb-cache/llm.sqlite'))
>>> del os.environ["FABNB_CACHE_DIR"]
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "llm_cache_path", "shipped"]


def cache_dir() -> Path:
    """fabnb's user cache: ``$FABNB_CACHE_DIR``, else ``$XDG_CACHE_HOME/fabnb``, else ``~/.cache/fabnb``."""
    if os.environ.get("FABNB_CACHE_DIR"):
        return Path(os.environ["FABNB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fabnb"


def llm_cache_path() -> Path:
    """The LLM response cache: ``cache_dir() / "llm.sqlite"``."""
    return cache_dir() / "llm.sqlite"


def shipped(folder: str, name: str) -> str:
    """The text of a file the wheel ships from the repository's top-level ``folder`` (``widgets``, ``examples``).

    The wheel maps ``<folder>/`` to ``fabnb/_<folder>/``; an editable install does not, so the source tree is
    the fallback.

    Examples
    --------
    >>> "[judge]" in shipped("examples", "offline.toml")
    True
    """
    here = Path(__file__).resolve().parents[1]  # fabnb/, above core/
    for where in (here / f"_{folder}", here.parent / folder):
        if (where / name).exists():
            return (where / name).read_text(encoding="utf-8")
    raise FileNotFoundError(f"{folder}/{name} is missing from {here / ('_' + folder)} and {here.parent / folder}; "
                            "reinstall fabnb.")

