"""``%fabnb``: the kit from a notebook cell (``%load_ext fabnb``).

========================================  ===================================================
``%fabnb doctor``                         what works on this machine (``fabnb doctor``)
``%fabnb run FILE [--dry-run] [--yes]``   an experiment: the plan, the run with its progress bar
``%%fabnb run [--dry-run] [--yes]``       the same, the cell body being the experiment's TOML
``%fabnb results DIR``                    the results explorer of a run's folder
``%fabnb rate --qa DIR --ratings DIR``    the rating app
========================================  ===================================================

A run works inside the kernel's running event loop (the LLM client runs its own loop in a worker thread).
The kernel's stop button stops it as Ctrl-C does: the manifest says ``stopped`` and the same cell resumes it.
In ``%%fabnb run`` relative paths (``output``, a questions or corpus folder) are relative to the notebook's
folder (the kernel's working directory).

Examples
--------
>>> parse("run examples/offline.toml --dry-run")
Namespace(command='run', file='examples/offline.toml', dry_run=True, no_probe=False, yes=False, qa=None, ratings=None)
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

__all__ = ["load_ipython_extension", "parse", "run_cell"]

_USAGE = ("%fabnb doctor | %fabnb run FILE [--dry-run] [--no-probe] [--yes] | %%fabnb run [--dry-run] [--yes] (the "
          "cell is the TOML) | %fabnb results DIR | %fabnb rate [--qa DIR] [--ratings DIR]")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a usage error is a message in the cell, not a SystemExit that kills the magic
        raise ValueError(f"%fabnb: {message}. Usage: {_USAGE}")


def parse(line: str) -> argparse.Namespace:
    """A ``%fabnb`` line's arguments; :class:`ValueError` with the usage when they are wrong."""
    p = _Parser(prog="%fabnb", add_help=False)
    p.add_argument("command", choices=["doctor", "run", "results", "rate"])
    p.add_argument("file", nargs="?")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--no-probe", action="store_true")
    p.add_argument("--yes", action="store_true")  # start a plan above the confirmation threshold
    p.add_argument("--qa")
    p.add_argument("--ratings")
    return p.parse_args(shlex.split(line))


def run_cell(args: argparse.Namespace, cell: str | None = None, cwd: str | Path = "."):
    """What one ``%fabnb`` / ``%%fabnb`` does; returns what the cell shows (or None)."""
    from ..core.errors import FabnbError

    if args.command == "doctor":
        from ..views.doctor import check, render

        print(render(check()))
        return None
    if args.command == "results":
        if not args.file:
            raise ValueError(f"%fabnb results needs a run's folder. Usage: {_USAGE}")
        from ..views.widgets import ResultsExplorer

        return ResultsExplorer(args.file)  # the folder's summary, figures and comparison too
    if args.command == "rate":
        from ..views.widgets import rating_app

        return rating_app(args.qa, args.ratings)
    from ..experiment import Experiment, run_experiment

    try:
        if cell is not None:
            import tomllib

            try:
                data = tomllib.loads(cell)
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"the cell is not valid TOML: {exc}; fix that line and run the cell again.") \
                    from None
            exp = Experiment.from_dict(data, source="the %%fabnb cell", text=cell, base=Path(cwd).resolve())
        elif args.file:
            exp = Experiment.from_file(args.file)
        else:
            raise ValueError(f"%fabnb run needs an experiment file, or use %%fabnb run with the TOML in the cell. "
                             f"Usage: {_USAGE}")
        return run_experiment(exp, dry_run=args.dry_run, probe=not args.no_probe, progress=True, yes=args.yes)
    except KeyboardInterrupt:
        print("fabnb: stopped; what was answered is kept: run this cell again to resume.")
        return None
    except FabnbError as exc:
        print(f"fabnb: {exc}")
        return None


def load_ipython_extension(ipython) -> None:
    """Register ``%fabnb`` and ``%%fabnb`` (``%load_ext fabnb``)."""
    def fabnb(line: str, cell: str | None = None):
        try:
            return run_cell(parse(line), cell, cwd=Path.cwd())
        except ValueError as exc:  # a usage error or a cell that is not TOML: said in the cell, no traceback
            print(exc)
            return None

    fabnb.__doc__ = __doc__
    ipython.register_magic_function(fabnb, magic_kind="line_cell", magic_name="fabnb")
