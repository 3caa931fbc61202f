"""Values read from a file, named in an error: what types a key takes, and the line of the file that sets it.

The experiment file's check and the registry of system kinds both say "``settings.mode = 3`` (line 12) must be a
string"; these two helpers write those words once.

Examples
--------
>>> type_names((int, float))
'an integer or a number'
>>> line_of('name = "demo"' + chr(10) + 'output = "out"', "output")
' (line 2)'
"""

from __future__ import annotations

import re

__all__ = ["TYPE_NAMES", "is_of", "line_of", "type_names"]

#: What an error calls a value of each type a TOML file can hold.
TYPE_NAMES: dict[type, str] = {int: "an integer", float: "a number", str: "a string", bool: "true/false",
                               list: "a list", dict: "a table", object: "any value"}


def type_names(types) -> str:
    """The words for a type or a tuple of types, joined by "or".

    >>> type_names(dict)
    'a table'
    """
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(TYPE_NAMES[t] for t in types)


def is_of(value, types) -> bool:
    """Whether ``value`` is of ``types``, a boolean counting only where ``bool`` is named (TOML's ``true`` is not
    an integer).

    >>> is_of(True, int), is_of(3, (int, float)), is_of(True, bool)
    (False, True, True)
    """
    named = types if isinstance(types, tuple) else (types,)
    return isinstance(value, named) and not (isinstance(value, bool) and bool not in named)


def line_of(text: str | None, key: str) -> str:
    """``' (line N)'`` of the first line of ``text`` that sets ``key``, for error messages; ``''`` when not found.

    >>> line_of("a = 1" + chr(10) + "settings = {mode = 2}", "mode")
    ' (line 2)'
    """
    if not text:
        return ""
    for n, line in enumerate(text.splitlines(), start=1):
        if re.match(rf'\s*"?{re.escape(key)}"?\s*=', line) or re.search(rf'[{{,]\s*"?{re.escape(key)}"?\s*=', line):
            return f" (line {n})"
    return ""
