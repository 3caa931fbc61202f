"""Progress bars of the stages: one bar a stage owns or one shared by several, and the repair of tqdm's lock that a
stop (Ctrl-C, the kernel's stop button) can leave held.

Examples
--------
>>> stage_bar(False, 10, "judging")
(None, False)
"""

from __future__ import annotations

__all__ = ["release_bar_lock", "stage_bar"]


def release_bar_lock() -> int:
    """Give back tqdm's write lock where this thread was left holding it; how many holds were given back.

    Ctrl-C, or the kernel's stop button, raises ``KeyboardInterrupt`` wherever the main thread is. Landing in
    tqdm between taking its write lock and the block that gives it back, it leaves the lock held by the main
    thread for the life of the kernel, and the next run's bar updates from a worker thread (the judge's event
    loop) wait on it for ever: a resumed ``%%fabnb run`` hung at judging, about 1 run in 3. A stage starts with no
    bar drawing, so whatever this thread holds of the lock then is such a leftover; every stage calls this first.

    Examples
    --------
    >>> release_bar_lock()
    0
    """
    import sys

    std = sys.modules.get("tqdm.std")
    if std is None:  # tqdm not imported yet: nothing can be held
        return 0
    given = 0
    for lock in (getattr(std.TqdmDefaultWriteLock, "th_lock", None),
                 getattr(std.TqdmDefaultWriteLock, "mp_lock", None)):
        owned = getattr(lock, "_is_owned", None) or getattr(getattr(lock, "_semlock", None), "_is_mine", None)
        while owned is not None and owned():
            lock.release()
            given += 1
    return given


def stage_bar(progress, total: int, desc: str, shared_total: bool = False):
    """A stage's progress bar, and whether the stage owns it (and so closes it).

    ``progress`` True makes a bar of the stage's own over ``total`` cells; an object with
    ``update(n)`` is a bar shared by several stages (``fabnb run``), left open, and with
    ``shared_total`` its total becomes what is done plus ``total`` (a later stage knows its
    count only when it starts), or stays the larger total its runner set; False makes none.

    Examples
    --------
    >>> stage_bar(False, 10, "judging")
    (None, False)
    """
    release_bar_lock()
    if hasattr(progress, "update"):
        if shared_total:  # never below a total the runner set from its plan (fabnb run's judge stage)
            progress.total = max(int(progress.total or 0), progress.n + total)
            progress.refresh()
        return progress, False
    if not progress:
        return None, False
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc), True
