"""The registry of system kinds: every kind of RAG system an experiment file may name, with its settings.

A kind registers where it is defined: an adapter class with the :func:`system_kind` decorator, the reference
system and the in-process frameworks with :func:`add_kind`. The experiment file's check, the plan,
``fabnb doctor``, the docs' table (:func:`kinds_table`) and the JupyterLab extension (the server's
``/fabnb/api/kinds`` route, :func:`kinds_json`) all read :func:`system_kinds`, so adding a RAG product is one new
module. A package of your own registers its kinds the same way and names the module in its ``fabnb_system_kinds``
entry point, which :func:`system_kinds` imports (the way llm finds its plugins).

A kind's settings (the ``settings`` table of a ``[[systems]]`` entry) are read from the adapter's signature: the
arguments of its ``__init__`` and, through ``**kwargs``, of the classes it extends, less those fabnb fills from the
table's own keys (:data:`PROVIDED`) and those the adapter fixes (its ``FIXED``). Each needs a line of docs; a
number may carry a range.

Examples
--------
>>> from fabnb.rag.kinds import system_kinds
>>> kinds = system_kinds()
>>> kinds["anythingllm"].settings["workspace"].required
True
>>> kinds["reference"].uses_endpoint, kinds["metaso"].needs_url
(True, False)
"""

from __future__ import annotations

import importlib
import inspect
import json
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..core.values import is_of, type_names

__all__ = ["PROVIDED", "SYSTEM_KINDS", "Setting", "SystemKind", "add_kind", "kinds_json", "kinds_table",
           "settings_of", "system_kind", "system_kinds"]

#: The arguments fabnb fills from a ``[[systems]]`` table's own keys (so they are never settings).
PROVIDED = frozenset({"self", "name", "url", "base_url", "api_key", "timeout", "kb"})

_ANNOTATIONS = {"str": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}


@dataclass(frozen=True)
class Setting:
    """One key of a kind's ``settings`` table: its types (``object``: any TOML value), whether it is required, its
    default, one line of docs, and for a number its range ``(low, high)``, both included.

    Examples
    --------
    >>> Setting("chunk_size", int, False, 1200, "tokens a chunk", (1, 32_768)).problem(0)
    'is out of range: it must be 1 to 32768'
    """

    name: str
    types: type | tuple
    required: bool
    default: object
    doc: str
    range: tuple | None = None

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` for this setting (the words after its name), or None."""
        if self.types is not object and not is_of(value, self.types):
            return f"must be {type_names(self.types)}"
        if self.range and is_of(value, (int, float)) and not self.range[0] <= value <= self.range[1]:
            return f"is out of range: it must be {self.range[0]} to {self.range[1]}"
        return None

    def describe(self) -> str:
        """The setting as the docs' table writes it."""
        kind = "" if self.types is object else f", {type_names(self.types)}"
        bounds = f", {self.range[0]} to {self.range[1]}" if self.range else ""
        default = "" if self.required or self.default is None else f", default `{self.default!r}`"
        return f"`{self.name}` ({self.doc}{kind}{bounds}{default})"


@dataclass(frozen=True)
class SystemKind:
    """One kind of system an experiment file may name.

    ``make`` builds an adapter (None for the reference system and the frameworks, which fabnb builds over an
    endpoint); ``framework`` is the in-process framework's key in :data:`fabnb.rag.frameworks.FRAMEWORKS`;
    ``server`` is ``(module, distribution, extra)`` of a framework server that installs with fabnb, which
    ``fabnb doctor`` checks; ``needs_url``: the table must give ``base_url`` or ``base_url_env``;
    ``check_installed`` returns the install command when the kind cannot run here, else None.
    """

    name: str
    doc: str
    settings: dict = field(default_factory=dict)
    make: Callable | None = field(default=None, repr=False)
    exposes_context: bool = True
    needs_url: bool = True
    reference: bool = False
    framework: str | None = None
    server: tuple | None = None
    module: str = ""
    check_installed: Callable | None = field(default=None, repr=False)

    @property
    def uses_endpoint(self) -> bool:
        """Whether the kind answers through an OpenAI-compatible endpoint of the file (the reference system and the
        in-process frameworks): it is probed, priced and planned as that endpoint."""
        return self.reference or self.framework is not None

    def missing(self) -> str | None:
        """The install command when this kind cannot run here (``check_installed``, a framework that is not
        installed, says so), else None."""
        return self.check_installed() if self.check_installed else None

    def build(self, name: str, url: str | None, api_key: str | None, timeout: float, settings: dict):
        """The adapter, its arguments given by keyword: ``name``, ``url`` or ``base_url``, ``api_key``,
        ``timeout`` and the settings."""
        if self.make is None:
            raise TypeError(f"system kind {self.name!r} is built over an endpoint, not by SystemKind.build.")
        params = inspect.signature(self.make).parameters
        kwargs = dict(settings, api_key=api_key, timeout=timeout)
        if "name" in params:
            kwargs["name"] = name
        for key in ("url", "base_url"):
            if key in params and url:
                kwargs[key] = url
        system = self.make(**kwargs)
        system.name = name
        return system

    def template(self, name: str | None = None) -> str:
        """A ``[[systems]]`` table of this kind, as TOML to fill in: its required settings with empty values, the
        optional ones commented out with their defaults, each with its docs.

        >>> print(system_kinds()["ragflow"].template())  # doctest: +ELLIPSIS
        [[systems]]
        name = "ragflow"
        kind = "ragflow"                 # RAGFlow's OpenAI-compatible chat endpoint
        base_url_env = "FABNB_RAGFLOW_URL" # the environment variable holding its URL
        api_key_env = "FABNB_RAGFLOW_KEY" # the one holding its key (never written in the file)
        settings.chat_id = ""            # fill in: the chat assistant's id
        # settings.headers = {}          # extra HTTP headers
        ...
        """
        env = f"FABNB_{self.name.upper().replace('-', '_')}"
        lines = ["[[systems]]", f'name = "{name or self.name}"', _commented(f'kind = "{self.name}"', self.doc)]
        if self.uses_endpoint:
            lines.append(_commented('model = "embedded"', "or a model name, with base_url_env and api_key_env"))
        else:
            url = f'base_url_env = "{env}_URL"'
            lines.append(_commented(url, "the environment variable holding its URL") if self.needs_url
                         else _commented(f"# {url}", "optional: the kind has a URL of its own"))
            lines.append(_commented(f'api_key_env = "{env}_KEY"', "the one holding its key (never written in the "
                                    "file)"))
        for s in self.settings.values():
            if s.required:
                lines.append(_commented(f"settings.{s.name} = {_toml(_EMPTY.get(s.types, ''))}", f"fill in: {s.doc}"))
            else:
                default = s.default if s.default is not None else _EMPTY.get(s.types, "")
                lines.append(_commented(f"# settings.{s.name} = {_toml(default)}", s.doc))
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict:
        """What the ``/fabnb/api/kinds`` route sends for this kind (plain values only)."""
        return {"name": self.name, "doc": self.doc, "uses_endpoint": self.uses_endpoint, "needs_url": self.needs_url,
                "exposes_context": self.exposes_context, "missing": self.missing(),
                "settings": [{"name": s.name, "types": "any" if s.types is object else type_names(s.types),
                              "required": s.required, "default": s.default if _plain(s.default) else repr(s.default),
                              "doc": s.doc, "range": list(s.range) if s.range else None}
                             for s in self.settings.values()]}


_EMPTY = {str: "", int: 0, (int, float): 0, bool: False, dict: {}, list: [], object: ""}


def _toml(value) -> str:
    """A TOML value (the few shapes a setting's default or placeholder takes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    return repr(value)


def _commented(line: str, comment: str) -> str:
    return f"{line:<32} # {comment}"


def _plain(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


#: Every kind registered so far, by name (:func:`system_kinds` makes sure the built-in ones and the plugins' are).
SYSTEM_KINDS: dict[str, SystemKind] = {}
_LOCK = threading.Lock()
_LOADING = threading.Lock()  # held while the built-in modules and the plugins register (they take _LOCK)
_LOADED: list[bool] = []


def add_kind(kind: SystemKind) -> SystemKind:
    """Register ``kind``; a second kind of the same name from another module is refused (the same module may
    register again: a reload).

    >>> _ = system_kinds()
    >>> add_kind(SystemKind("reference", "again", module="mine"))
    Traceback (most recent call last):
    ...
    ValueError: system kind 'reference' is registered twice: by fabnb.rag.system and by 'mine'; rename one.
    """
    with _LOCK:
        old = SYSTEM_KINDS.get(kind.name)
        if old is not None and old.module != kind.module:
            raise ValueError(f"system kind {kind.name!r} is registered twice: by {old.module} and by "
                             f"{kind.module!r}; rename one.")
        SYSTEM_KINDS[kind.name] = kind
    return kind


def settings_of(cls, docs: dict[str, str], ranges: dict | None = None) -> dict[str, Setting]:
    """The settings of an adapter class, from its signature and, through ``**kwargs``, its bases' (the first
    class that names an argument defines it); required: an argument of ``cls`` itself without a default.

    Every setting needs a line in ``docs``; a missing one is a :class:`TypeError` naming it.
    """
    out: dict[str, Setting] = {}
    fixed = set(getattr(cls, "FIXED", ()))
    for owner in cls.__mro__:
        init = owner.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for name, p in params.items():
            if name in out or name in PROVIDED or (owner is not cls and name in fixed) or p.kind in (
                    p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            if name not in docs:
                raise TypeError(f"{cls.__name__}: setting {name!r} has no docs; give it a line in settings={{...}}.")
            out[name] = Setting(name, _type_of(p.annotation),
                                owner is cls and p.default is inspect.Parameter.empty,
                                # a base's default may be one the class overrides in its body: not shown
                                None if p.default is inspect.Parameter.empty or owner is not cls else p.default,
                                docs[name],
                                (ranges or {}).get(name))
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break  # its bases' arguments do not reach it through **kwargs
    return dict(sorted(out.items()))


def _type_of(annotation):
    """The types a setting takes, from its annotation (a string under ``from __future__ import annotations``, else
    the type; ``X | None`` is X); ``object`` (any value) when it is none of TOML's."""
    if isinstance(annotation, str):
        return _ANNOTATIONS.get(annotation.replace(" | None", "").strip(), object)
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if len(args) == 1:
        return _type_of(args[0])
    return _ANNOTATIONS.get(getattr(annotation, "__name__", ""), object)


def system_kind(name: str, doc: str, settings: dict[str, str], *, ranges: dict | None = None,
                exposes_context: bool = True, server: tuple | None = None):
    """Register the decorated adapter class as the system kind ``name``.

    Parameters
    ----------
    name : str
        What an experiment file's ``kind`` says.
    doc : str
        One line: what the kind talks to.
    settings : dict
        One line of docs per setting (see :func:`settings_of`); a class's setting without one is refused.
    ranges : dict, optional
        ``{setting: (low, high)}`` for numbers.
    exposes_context : bool
        Whether its answers come with the context it retrieved.
    server : tuple, optional
        ``(module, distribution, extra)`` of a framework server that installs with fabnb.

    Examples
    --------
    >>> @system_kind("echo-doc", "an example", {"greeting": "what it says first"})
    ... class Echo:
    ...     def __init__(self, base_url: str, greeting: str = "hi", api_key=None, timeout=1.0):
    ...         self.greeting = greeting
    >>> SYSTEM_KINDS["echo-doc"].build("e", "http://127.0.0.1:9", None, 1.0, {"greeting": "yo"}).greeting
    'yo'
    >>> _ = SYSTEM_KINDS.pop("echo-doc")
    """

    def register(cls):
        base_url = inspect.signature(cls.__init__).parameters.get("base_url")
        needs_url = base_url is None or base_url.default is inspect.Parameter.empty
        add_kind(SystemKind(name, doc, settings_of(cls, settings, ranges), cls, exposes_context, needs_url,
                            server=server, module=cls.__module__))
        return cls

    return register


#: The modules that define fabnb's own kinds.
_BUILT_IN = ("fabnb.rag.system", "fabnb.rag.adapters", "fabnb.rag.frameworks")


def system_kinds() -> dict[str, SystemKind]:
    """Every system kind: fabnb's own and those of the installed packages' ``fabnb_system_kinds`` entry points
    (imported once), and any registered since, by name in registration order.

    A plugin that fails to import is named in a :class:`ImportError` with the entry point.

    Examples
    --------
    >>> kinds = system_kinds()
    >>> [k for k in kinds if kinds[k].framework]
    ['llamaindex', 'langchain', 'haystack']
    """
    with _LOADING:
        if not _LOADED:
            _load()
            _LOADED.append(True)
    return dict(SYSTEM_KINDS)


def _load() -> None:
    for module in _BUILT_IN:
        importlib.import_module(module)
    from importlib.metadata import entry_points

    for ep in entry_points(group="fabnb_system_kinds"):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin names itself, never fabnb
            raise ImportError(f"the fabnb_system_kinds entry point {ep.name!r} ({ep.value}) failed to "
                              f"import: {exc}; fix or uninstall that package.") from exc


def kinds_table() -> str:
    """docs/experiment.md's table of system kinds, in Markdown (a test compares the docs with it).

    >>> kinds_table().splitlines()[0]
    '| kind | what it is | required settings | optional settings |'
    """
    rows = ["| kind | what it is | required settings | optional settings |", "|---|---|---|---|"]
    for kind in system_kinds().values():
        required = ", ".join(s.describe() for s in kind.settings.values() if s.required) or "none"
        optional = ", ".join(s.describe() for s in kind.settings.values() if not s.required) or "none"
        rows.append(f"| `{kind.name}` | {kind.doc} | {required} | {optional} |")
    return "\n".join(rows)


def kinds_json() -> list[dict]:
    """Every kind as plain values, for the ``/fabnb/api/kinds`` route."""
    return [kind.as_json() for kind in system_kinds().values()]
