"""Voilà as fabnb serves its pages: secrets out of the log, and kernels that do not pile up.

``python -m fabnb.core.voila NOTEBOOK [Voilà options]`` is what :func:`fabnb.core.pages.serve_page` starts (``fabnb rate
--serve``, ``fabnb explore``). It is Voilà's own application with three changes:

- **no token in the log**: standalone Voilà sets no ``log_function``, so tornado's default logged refused
  requests with their whole URL (``403 GET /voila/files/ratings?token=...``); the access log is now
  jupyter_server's (``token=[secret]``, also in the referer it logs for a failed request), and
  :class:`SecretFilter` scrubs what tornado's own warnings write about a refused request;
- **idle kernels are culled**: every page load starts a kernel, and Voilà culls none unless told; a page left
  alone for :data:`CULL_IDLE_SECONDS` loses its kernel (its ratings are already on disk);
- **nothing from another host**: the ``fabnb`` template (``share/voila/templates/fabnb``) is Voilà's ``lab``
  without the two Font Awesome stylesheets it links from a CDN (every expert's browser contacted a third-party
  host, and the pages lost those icons offline; fabnb's widgets draw none);
- **one live kernel per rater, and a cap for the server**: a page opened by a rater's link (``?rater=...``)
  replaces that rater's older page's kernel, and no more than :data:`MAX_KERNELS` kernels run at once (the next
  page load is refused with 503 and a message, until one ends).

Nothing here is imported by ``import fabnb``; Voilà itself is imported only when the page is served.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from urllib.parse import parse_qs

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web

__all__ = ["CULL_IDLE_SECONDS", "LOGGERS", "MAX_KERNELS", "TEMPLATES", "RaterKernels", "SecretFilter", "app_class",
           "main", "rater_of_env"]

#: The Jupyter data folder that holds fabnb's Voilà template (``voila/templates/fabnb``).
TEMPLATES = Path(__file__).resolve().parents[1] / "share"
#: A page whose kernel has been idle this long (and has no browser connected) loses its kernel.
CULL_IDLE_SECONDS = 900
#: The most kernels one served page may run at once (each is ~200 MB): ``FABNB_MAX_KERNELS`` overrides it.
MAX_KERNELS = 24


def rater_of_env(env: dict | None) -> str | None:
    """The rater a page load names (``rater=`` of Voilà's ``QUERY_STRING``), or None (the name prompt's page)."""
    named = parse_qs((env or {}).get("QUERY_STRING", "")).get("rater", [None])[0]
    return named or None


class RaterKernels(AsyncMappingKernelManager):
    """Voilà's kernel manager, with one live kernel per rater and a cap on all of them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rater_kernel: dict[str, str] = {}

    async def start_kernel(self, *args, env=None, **kwargs):
        limit = int(os.environ.get("FABNB_MAX_KERNELS") or MAX_KERNELS)
        rater = rater_of_env(env)
        old = self._rater_kernel.get(rater) if rater else None
        if old is not None and old in self:
            await self.shutdown_kernel(old, now=True)  # a rater's new page replaces the old one's kernel
        if len(self.list_kernel_ids()) >= limit:
            raise web.HTTPError(503, f"the rating app runs {limit} pages at once, its most; close a page (or wait "
                                     "a few minutes for idle ones to end) and load this one again.")
        kernel_id = await super().start_kernel(*args, env=env, **kwargs)
        if rater:
            self._rater_kernel[rater] = kernel_id
        return kernel_id


_SECRET = re.compile(r"((?:token|_xsrf|xsrf)=)[^&\s'\"]+", re.IGNORECASE)


class SecretFilter(logging.Filter):
    """Writes ``token=[secret]`` for every token a log record would carry: tornado logs a refused request's whole
    URL in its warning (``403 GET /voila/files/x?token=...: File not allowlisted``), beside the access line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = _SECRET.sub(r"\1[secret]", message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, ()
        return True


#: The loggers a served page's requests are logged on: the filter sits on each (a filter on a logger sees the
#: records made there, not those that reach it from a child logger).
LOGGERS = ("tornado.access", "tornado.general", "tornado.application", "Voila", "ServerApp")


def app_class():
    """Voilà's application class with jupyter_server's scrubbing request log, and no token in any log line."""
    from jupyter_server.log import log_request
    from voila.app import Voila

    class FabnbVoila(Voila):
        def start(self):
            # tornado's default access log writes the whole URL; jupyter_server's writes token=[secret]
            self.tornado_settings = {**self.tornado_settings, "log_function": log_request}
            for name in (*LOGGERS, self.log.name):
                logging.getLogger(name).addFilter(SecretFilter())
            super().start()

    return FabnbVoila


def main(argv=None) -> None:
    """Run Voilà on a notebook with fabnb's log, culling and kernel limits (the options given come after fabnb's
    defaults, so they win)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # fabnb's template (share/voila/templates/fabnb: Voilà's lab with nothing from another host) is found on
    # Jupyter's data path, which JUPYTER_PATH extends.
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(TEMPLATES), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    defaults = ["--VoilaConfiguration.template=fabnb",
                f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_SECONDS}",
                "--MappingKernelManager.cull_interval=60",
                "--VoilaConfiguration.multi_kernel_manager_class=fabnb.core.voila.RaterKernels"]
    app_class().launch_instance(argv=defaults + argv)


if __name__ == "__main__":
    main()
