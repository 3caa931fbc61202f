"""Who may open the rating app when it is served beyond loopback: one secret link per rater.

``fabnb rate --serve --host ADDRESS`` gives each rater a personal link that carries a
secret token (:func:`issue_links`; the links go to a file the study lead sends out, never
to the terminal or a log). Two checks stand between a request and a rater's data:

- the server's: Voilà runs on jupyter_server, whose identity provider maps a request to a
  user. :class:`RaterIdentityProvider` maps a valid token to its rater and refuses every
  request without one (a refused page goes to the login page, the kernel API answers 403);
  a link naming one rater with another rater's token is refused too;
- the kernel's: the notebook behind the page sees only the query string (Voilà's
  ``QUERY_STRING``), so :func:`rater_of_link` checks the token again before it opens a
  rater's file, and the page shows that rater's panel only: no name prompt, no other data.

Only hashes of the tokens are kept on the server's side (``access.json``); the links file
holds the tokens themselves and is written readable by its owner only.

Examples
--------
>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> links = issue_links(["ana", "ben"], "http://10.0.0.5:8866/", folder)
>>> url = dict(read_links(links))["ana"]
>>> rater_of_link(url.split("?", 1)[1], folder / "access.json")
'ana'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, quote

from jupyter_server.auth import User
from jupyter_server.auth.identity import IdentityProvider
from tornado import web

from ..core.errors import FabnbError

__all__ = ["ACCESS_ENV", "MAX_RATER_NAME", "AccessError", "RaterIdentityProvider", "issue_links", "rater_name_problem",
           "rater_of_link", "read_links"]

#: The environment variable that names ``access.json`` for the server and the page's kernel.
ACCESS_ENV = "FABNB_RATING_ACCESS"


class AccessError(FabnbError, ValueError):
    """A rating link that opens nothing, or raters that cannot be given links."""


#: The longest rater name (in characters): the page, ``--raters`` and the store all refuse a longer one.
MAX_RATER_NAME = 80


def rater_name_problem(rater) -> str | None:
    """What is wrong with a rater name, or None: the one rule that ``--raters``, the page and the store apply.

    A name is printable text (no tab, newline or other control character), holds no path separator (``/`` or
    ``\\``), does not start or end with a space, and has 1 to :data:`MAX_RATER_NAME` characters.

    >>> rater_name_problem("Ana Lima"), rater_name_problem("../../etc")[:38]
    (None, "'../../etc' holds a path separator (/ ")
    """
    if not isinstance(rater, str) or not rater.strip():
        return "enter your name (letters, digits, '-' or '_') to start rating."
    if len(rater) > MAX_RATER_NAME:
        return (f"a rater name of {len(rater)} characters is too long: use at most {MAX_RATER_NAME} (initials and a "
                "surname are enough).")
    if "/" in rater or "\\" in rater:
        return f"{rater!r} holds a path separator (/ or \\); use letters, digits, spaces, '-' or '_'."
    if not rater.isprintable():
        return f"{rater!r} holds a tab, a line break or another control character; type the name on one line."
    if rater != rater.strip():
        return f"{rater!r} starts or ends with a space; give the name without them."
    return None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def read_links(path: str | Path) -> list[tuple[str, str]]:
    """(rater, link) of a links file written by :func:`issue_links`."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            rater, _, url = line.partition("\t")
            rows.append((rater, url))
    return rows


def issue_links(raters, base_url: str, folder: str | Path) -> Path:
    """A secret link per rater: ``links.tsv`` (rater, link; readable by its owner only) and ``access.json``
    (rater -> hash of the token, what the server and the kernel check) in ``folder``.

    A rater who already has a link in ``links.tsv`` keeps it (a restarted server does not break the links sent
    out); the others get new tokens. Returns the path of ``links.tsv``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raters = list(dict.fromkeys(r.strip() for r in raters if r and r.strip()))
    bad = [(r, rater_name_problem(r)) for r in raters if rater_name_problem(r)]
    if bad:
        raise AccessError("--raters: " + "; ".join(problem for _, problem in bad) + " Nothing was written.")
    if not raters:
        raise AccessError("serving beyond 127.0.0.1 needs the raters who get a link: pass --raters ana,ben (or "
                          "--manifests, whose raters get one each).")
    links_path, access_path = folder / "links.tsv", folder / "access.json"
    tokens = {}
    if links_path.exists():
        for rater, url in read_links(links_path):
            token = parse_qs(url.split("?", 1)[-1]).get("token", [""])[0]
            if token:
                tokens[rater] = token
    tokens = {r: tokens.get(r) or secrets.token_urlsafe(24) for r in raters}
    base = base_url.rstrip("/") + "/"
    lines = ["# fabnb rating links: send each rater their own line; anyone with a link can rate as that rater"]
    lines += [f"{r}\t{base}?rater={quote(r)}&token={t}" for r, t in tokens.items()]
    _write_private(links_path, "\n".join(lines) + "\n")
    _write_private(access_path, json.dumps({"raters": {r: _digest(t) for r, t in tokens.items()}}, indent=1))
    return links_path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


def _raters(access_path: str | Path) -> dict:
    return json.loads(Path(access_path).read_text(encoding="utf-8"))["raters"]


def _match(token: str, access_path: str | Path) -> str | None:
    """The rater whose token this is, or None (compared in constant time)."""
    if not token:
        return None
    digest = _digest(token)
    found = None
    for rater, known in _raters(access_path).items():
        if hmac.compare_digest(known, digest):
            found = rater
    return found


def rater_of_link(query: str, access_path: str | Path) -> str:
    """The rater a page's query string (``rater=...&token=...``) opens, checked against ``access.json``.

    Raises
    ------
    AccessError
        No token, a token that is not valid, or a token of another rater than the link names; the message never
        repeats the token.
    """
    args = parse_qs(query or "")
    token = args.get("token", [""])[0]
    named = args.get("rater", [None])[0]
    rater = _match(token, access_path)
    if rater is None:
        raise AccessError("this page needs your personal rating link (the one the study lead sent you); the link "
                          "used here has no valid token.")
    if named is not None and named != rater:
        raise AccessError("this link's token belongs to another rater: open your own link.")
    return rater


class RaterIdentityProvider(IdentityProvider):
    """jupyter_server's identity provider for the rating app: a request is a rater when it carries that rater's
    token (or the cookie a token request set); every other request is anonymous and refused.

    Voilà takes it with ``--Voila.identity_provider_class=fabnb.qa.access.RaterIdentityProvider``; it reads the
    file that :data:`ACCESS_ENV` names.
    """

    @property
    def auth_enabled(self) -> bool:
        return True

    @property
    def login_available(self) -> bool:
        return False  # there is no password: a rater comes in through their link

    def get_user_token(self, handler):
        rater = _match(self.get_token(handler) or "", os.environ[ACCESS_ENV])
        if rater is None:
            return None
        named = handler.get_argument("rater", None)
        if named is not None and named != rater:
            return None  # a link naming one rater with another's token opens nothing
        return User(username=_digest(rater)[:16], name=rater, display_name=rater)

    def process_login_form(self, handler):
        return None

    def get_handlers(self) -> list:
        # Where jupyter_server sends a request it refused: a page that says why (no password form, no loop).
        return [("/login", _RefusedHandler)]


class _RefusedHandler(web.RequestHandler):
    def get(self):
        self.set_status(403)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish("<!doctype html><title>Rating link needed</title><p>This page needs your personal rating "
                    "link, the one the study lead sent you. Open that link (it carries your token).</p>")
