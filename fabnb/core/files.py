"""Files the kit opens by a name it was given: inside a root, regular, and not larger than a cap.

Every file fabnb opens by a name that came from a file or a request (QA files, a corpus, a knowledge base,
ratings, the paths a run's manifest records, an experiment file) goes through here:

- :func:`inside` says whether a path lies under a root (symbolic links followed), for servers that must not
  read past their root;
- :func:`json_lines` splits a JSON Lines text into its lines' values, with what is wrong with a line, for the
  caller to refuse or skip it naming its file;
- :func:`read_bytes` and :func:`read_text` open regular files only (``/dev/zero``, a FIFO or a folder is
  refused before it is opened), refuse one larger than a cap, checked on its size first and again while
  reading (a file that grows, or one whose size lies), and say which setting named the file and how to fix it.

The caps are in :data:`MAX_FILE_BYTES`: a QA pair, an experiment file or a manifest is kilobytes; a corpus
document may be a book.

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "q.json").write_text("{}")
>>> read_text(folder / "q.json", setting="[questions] source")
'{}'
>>> try:
...     read_text("/dev/zero", setting="[questions] source")
... except FileRefused as exc:
...     print(exc)
[questions] source: /dev/zero is not a regular file (a character device); name a file or a folder of files.
>>> inside(folder / "q.json", folder), inside("/etc/passwd", folder)
(True, False)
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import FabnbError

__all__ = ["MAX_FILE_BYTES", "FileRefused", "inside", "json_lines", "read_bytes", "read_text", "write_whole"]

#: The largest file of each kind fabnb reads, in bytes: what is larger is refused with its size and this cap.
MAX_FILE_BYTES = {
    "qa": 16 * 1024 * 1024,          # one QA pair: the released ones are under 20 kB
    "experiment": 1024 * 1024,       # an experiment TOML
    "manifest": 64 * 1024 * 1024,    # a run's manifest.json (it lists question ids)
    "document": 256 * 1024 * 1024,   # one corpus document (a PDF book)
    "knowledge_base": 64 * 1024 * 1024,
}

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}


class FileRefused(FabnbError, ValueError):
    """A file that fabnb will not read: not a regular file, larger than its cap, or not text. Nothing was kept.

    ``setting`` names what pointed at the file, ``path`` is the file and ``reason`` what is wrong with it and
    the fix; the message is ``"{setting}: {path} {reason}"``.
    """

    def __init__(self, setting: str, path, reason: str):
        super().__init__(f"{setting}: {path} {reason}")
        self.setting, self.path, self.reason = setting, str(path), reason


def json_lines(text: str):
    """Each non-blank line of a JSON Lines text as ``(line number, value, why)``: ``why`` is None for a JSON object,
    else what the line is instead ("not JSON (<the parser's message>)", "a list, not a JSON object"), with ``value``
    None for a line that is not JSON. The caller refuses or skips such a line, naming its file.

    >>> for number, value, why in json_lines('{"id": 1}\\n\\n[2]\\n{oops\\n'):
    ...     print(number, value, why)
    1 {'id': 1} None
    3 [2] a list, not a JSON object
    4 None not JSON (Expecting property name enclosed in double quotes)
    """
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, None, f"not JSON ({exc.msg})"
            continue
        yield number, value, None if isinstance(value, dict) else f"a {type(value).__name__}, not a JSON object"


def inside(path: str | Path, root: str | Path) -> bool:
    """Whether ``path`` lies in ``root`` (or is it), with ``..`` and symbolic links resolved."""
    try:
        path, root = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return False
    return path == root or root in path.parents


def _checked(path: Path, setting: str, max_bytes: int) -> int:
    """The size of ``path`` after checking it is a regular file within ``max_bytes``."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise FileRefused(setting, path, "does not exist; check the path.") from None
    except OSError as exc:
        raise FileRefused(setting, path, f"cannot be read ({exc.strerror}).") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise FileRefused(setting, path, f"is not a regular file ({kind}); name a file or a folder of files.")
    if st.st_size > max_bytes:
        raise FileRefused(setting, path, f"holds {st.st_size:,} bytes, over the {max_bytes:,} fabnb reads for "
                          "it; name a smaller file (or split it).")
    return st.st_size


def read_bytes(path: str | Path, *, setting: str, max_bytes: int = MAX_FILE_BYTES["qa"]) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; :class:`FileRefused` naming ``setting`` otherwise.

    The size is checked before the file is opened and again while it is read, so a file that grows (or a
    special file that claims no size) is never read past the cap.
    """
    path = Path(path)
    _checked(path, setting, max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in after the check does not block
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileRefused(setting, path, f"cannot be read ({exc.strerror}).") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced between the check and the open
            raise FileRefused(setting, path, "is not a regular file; name a file or a folder of files.")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileRefused(setting, path, f"grew past the {max_bytes:,} bytes fabnb reads for it while it was "
                          "read; name a file that is not being written.")
    return data


def read_text(path: str | Path, *, setting: str, max_bytes: int = MAX_FILE_BYTES["qa"]) -> str:
    """The UTF-8 text of a regular file (a byte-order mark dropped); :class:`FileRefused` naming ``setting``
    when it is not a regular file, is too large, or is not UTF-8 (with the byte offset of the first bad byte)."""
    data = read_bytes(path, setting=setting, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise FileRefused(setting, path, f"is not UTF-8 text (byte {exc.start}, line {line}: "
                          f"{data[exc.start:exc.start + 1]!r}); save it as UTF-8.") from None


def write_whole(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (``<name>.tmp``, then a rename): a kill never leaves half a
    file, and a reader sees the old file or the new one.

    Examples
    --------
    >>> import tempfile
    >>> path = write_whole(Path(tempfile.mkdtemp()) / "summary.md", "# results\\n")
    >>> path.read_text(), sorted(p.name for p in path.parent.iterdir())
    ('# results\\n', ['summary.md'])
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
