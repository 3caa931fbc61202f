"""The Jupyter server extension: authenticated routes under ``/fabnb/api/`` for fabnb's JupyterLab panels.

Enabled on install (``jupyter_server_config.d/fabnb.json``); ``jupyter server extension list`` shows it.
Every route needs Jupyter's authentication (and its XSRF check on POST), reads paths relative to the server's
root and refuses any outside it; the answers come from :mod:`fabnb.jupyter.api`, the work that takes time
(a plan, a store read) runs off the server's event loop. Importing this module imports no pandas: the
extension adds little to JupyterLab's start.

Routes (GET unless marked):

========================  ==============================================================
``runs``                  every run under the root with its status; POST ``{"file", "yes", "confirm_usd"}`` starts one
``runs/stop`` (POST)      ``{"path"}``: stop the run that holds a folder (a clean stop)
``plan``                  ``?file=[&probe=1]``: an experiment file's plan (with probes: its time), or its error
``doctor``                ``fabnb doctor``'s table
``kinds``                 the system kinds an experiment file may name, with their settings (the registry)
``new`` (POST)            ``{"folder", "kind", "name", "runs_folder"}``: a commented experiment TOML written
                          there, named (file, experiment, run folder) as asked, a system of that kind added
``rate`` (POST)           ``{"folder"}``: the rating app's page written there
``results/summary``       ``?path=``: a run's summary, status, notes and calibration
``/fabnb/page/RUN/FILE``  the run's results page (the one renderer; ``RUN`` its path in base64url), made again
                          when the run changed: what the viewer's frame shows
========================  ==============================================================
"""

from __future__ import annotations

import asyncio
import base64
import json

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.application import ExtensionApp
from tornado import web

from .api import (
    MAX_BODY_BYTES,
    ApiError,
    Results,
    doctor_table,
    kind_table,
    loads,
    new_experiment,
    plan_file,
    rate_page,
    runs,
    text_field,
)
from .jobs import Jobs

__all__ = ["FabnbExtension", "ROUTES"]


class _Handler(APIHandler):
    """A route: its answer computed off the event loop, an :class:`ApiError` sent as its status and message."""

    @property
    def root(self):
        return self.settings["fabnb_root"]

    async def answer(self, fn, *args):
        """Send ``fn(*args)`` as JSON; returns it, or None when it was refused (sent as its status and message)."""
        refused = False
        try:
            result = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        except ApiError as exc:
            self.set_status(exc.status)
            result, refused = {"error": str(exc), **exc.extra}, True
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(result, default=str))
        return None if refused else result

    def body(self) -> dict:
        """The request's JSON object (:func:`fabnb.jupyter.api.loads`: size and nesting capped), parsed once per
        request however many fields a route reads. Called inside :meth:`answer`'s function, so a refusal is its
        status and message, never a 500 with the body in the log."""
        parsed = getattr(self, "_parsed_body", None)
        if parsed is None:
            if len(self.request.body) > MAX_BODY_BYTES:  # refused before it is decoded or parsed
                raise ApiError(f"the request body holds {len(self.request.body):,} bytes, over the "
                               f"{MAX_BODY_BYTES:,} a request may send.", 413)
            parsed = self._parsed_body = loads(self.request.body.decode("utf-8", "replace"), "the request body")
        return parsed



class RunsHandler(_Handler):
    @web.authenticated
    async def get(self):
        if await self.answer(runs, self.root, self.settings["fabnb_jobs"]):
            self.settings["fabnb_results"].warm()  # a run to open: its viewer's imports now, not at the double-click

    @web.authenticated
    async def post(self):
        await self.answer(lambda: self.settings["fabnb_jobs"].start(text_field(self.body(), "file", "runs"),
                                                                    yes=self.body().get("yes") is True,
                                                                    confirm_usd=self.body().get("confirm_usd")))


class StopHandler(_Handler):
    @web.authenticated
    async def post(self):
        await self.answer(lambda: self.settings["fabnb_jobs"].stop(text_field(self.body(), "path", "runs/stop")))


class PlanHandler(_Handler):
    @web.authenticated
    async def get(self):
        await self.answer(plan_file, self.root, self.get_argument("file", ""), self.get_argument("probe", "") == "1")


class DoctorHandler(_Handler):
    @web.authenticated
    async def get(self):
        await self.answer(doctor_table)


class KindsHandler(_Handler):
    @web.authenticated
    async def get(self):
        await self.answer(kind_table)


class NewHandler(_Handler):
    @web.authenticated
    async def post(self):
        def made() -> dict:
            body = self.body()
            return {"file": new_experiment(self.root, text_field(body, "folder", "new"),
                                           text_field(body, "name", "new") or "experiment.toml",
                                           text_field(body, "kind", "new"),
                                           text_field(body, "runs_folder", "new") or "fabnb-runs")}

        await self.answer(made)


class RateHandler(_Handler):
    @web.authenticated
    async def post(self):
        await self.answer(lambda: {"file": rate_page(self.root, text_field(self.body(), "folder", "rate"))})


class SummaryHandler(_Handler):
    @web.authenticated
    async def get(self):
        await self.answer(self.settings["fabnb_results"].summary, self.get_argument("path", ""))


class PageHandler(JupyterHandler):
    """A file of a run's results page (the one renderer's, :meth:`fabnb.jupyter.api.Results.page_file`), for the
    viewer's frame. The run is the first segment (its path, base64url), so the page's relative ``data/...`` and
    ``results.js`` stay under it."""

    @web.authenticated
    async def get(self, key: str, name: str):
        results = self.settings["fabnb_results"]
        try:
            rel = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode("utf-8")
            path = await asyncio.get_running_loop().run_in_executor(None, results.page_file, rel, name)
        except (ValueError, UnicodeDecodeError):
            return self._refuse(ApiError("the page's address does not name a run; open it from the viewer.", 404))
        except ApiError as exc:
            return self._refuse(exc)
        self.set_header("Content-Type", _PAGE_TYPES[path.suffix])
        self.set_header("Cache-Control", "no-store")
        self.finish(path.read_bytes())

    def _refuse(self, exc: ApiError) -> None:
        self.set_status(exc.status)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(str(exc))


_PAGE_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".png": "image/png"}


class CompareRunsHandler(_Handler):
    @web.authenticated
    async def get(self):
        results = self.settings["fabnb_results"]
        await self.answer(lambda: results.compare_runs(self.get_argument("base", ""),
                                                       self.get_argument("candidate", ""),
                                                       self.get_argument("allow", ""),
                                                       self.get_argument("margin", "0.02")))


class RateSampleHandler(_Handler):
    @web.authenticated
    async def post(self):
        results = self.settings["fabnb_results"]

        def rate():
            body = self.body()
            return results.rate_sample(text_field(body, "path", "results/rate-sample"), body.get("n", 60),
                                       body.get("raters", []))
        await self.answer(rate)


#: The routes, relative to the server's base URL.
ROUTES = [("/fabnb/api/runs", RunsHandler), ("/fabnb/api/runs/stop", StopHandler), ("/fabnb/api/plan", PlanHandler),
          ("/fabnb/api/doctor", DoctorHandler), ("/fabnb/api/kinds", KindsHandler),
          ("/fabnb/api/new", NewHandler), ("/fabnb/api/rate", RateHandler),
          ("/fabnb/api/results/summary", SummaryHandler), (r"/fabnb/page/([A-Za-z0-9_-]+)/(.+)", PageHandler),
          ("/fabnb/api/results/compare-runs", CompareRunsHandler),
          ("/fabnb/api/results/rate-sample", RateSampleHandler)]


class FabnbExtension(ExtensionApp):
    """fabnb's server extension: the runs of the server's root, their plans, starts and stops, their results."""

    name = "fabnb"
    load_other_extensions = True

    def initialize_settings(self):
        root = self.serverapp.root_dir
        self.settings.update(fabnb_root=root, fabnb_jobs=Jobs(root), fabnb_results=Results(root))

    def initialize_handlers(self):
        self.handlers.extend(ROUTES)

    async def stop_extension(self):
        jobs = self.settings.get("fabnb_jobs")
        if jobs is not None:
            await asyncio.get_running_loop().run_in_executor(None, jobs.shutdown)
