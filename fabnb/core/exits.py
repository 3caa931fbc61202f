"""The exit statuses of every ``fabnb`` command: one table, read by the CLI, its help and the docs.

A script or a CI job can tell from the status alone whether a run stored every cell, stored some and failed
others, was stopped by its budget or by a person, or never started. ``fabnb --help`` prints :func:`table`;
``docs/cli.md`` is the same table (a test compares them).

Examples
--------
>>> EXIT["failed_cells"], EXIT["stopped"]
(3, 130)
>>> print(table().splitlines()[0])
exit statuses (every fabnb command):
"""

from __future__ import annotations

__all__ = ["EXIT", "MEANING", "table"]

#: Each status by name.
EXIT = {
    "ok": 0,
    "check_failed": 1,
    "usage": 2,
    "failed_cells": 3,
    "budget": 4,
    "confirm": 5,
    "inconclusive": 6,
    "stopped": 130,
}

#: What each status means, in the words the help and the docs print.
MEANING = {
    "ok": "done: a run finished with every cell stored (or a dry run planned, a page was served and stopped, a "
          "report was written)",
    "check_failed": "a check failed: fabnb doctor: the default LLM cannot answer on this machine; fabnb compare "
                    "--fail-on-regression: the candidate is worse than the base beyond the margin (the primary "
                    "difference's interval lies wholly below it)",
    "usage": "a usage error, or a file, folder or setting that is refused (the message names it); nothing was asked",
    "failed_cells": "a run finished, but some cells (or all) failed; they are listed, and a rerun asks them again",
    "budget": "a run stopped before a call could pass budget_usd; raise it and run again to go on",
    "confirm": "a run's plan is above the confirmation threshold (cost or time); nothing was asked; run again "
               "with --yes",
    "inconclusive": "fabnb compare --fail-on-inconclusive: the questions are too few to tell whether the candidate "
                    "is worse; the notice says about how many would settle it",
    "stopped": "stopped by Ctrl-C or SIGTERM (JupyterLab's Stop); what was stored is kept, and a rerun resumes",
}


def table() -> str:
    """The exit statuses as the CLI's help prints them."""
    lines = ["exit statuses (every fabnb command):"]
    lines += [f"  {EXIT[name]:>3}  {MEANING[name]}" for name in EXIT]
    return "\n".join(lines)
