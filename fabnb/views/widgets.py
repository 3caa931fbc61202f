"""Jupyter widgets: thin anywidget views over the plain-Python sessions.

- :class:`RatingPanel` over :class:`fabnb.qa.rating.RatingSession`
- :class:`RatingAppView` over :class:`fabnb.qa.rating_app.RatingApp` (the code-free app: a name, then the panel)
- :class:`QACurator` over :class:`fabnb.qa.curation.CurationSession`
- :class:`CorpusInspector` over :class:`fabnb.corpus.collection.CorpusSession`
- :class:`ResultsExplorer` over :class:`fabnb.views.explorer.Explorer`, drawn by the one results renderer

The front end (``widgets/*.js`` and ``*.css`` in the source tree, ``fabnb/_widgets`` in
the wheel) is plain ES modules with no imports: nothing is fetched at run time. It
shows every text from corpora, QA files and LLM output with ``textContent``, so
nothing in them can inject markup or script. The front end sends actions
(``{"action": "rate", "dimension": "accuracy", "value": 4}``); :meth:`handle` applies
them to the session, which writes to its store before the view shows "saved".
Tests drive :meth:`handle` without a browser.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import time
from pathlib import Path

import anywidget
import pandas as pd
import traitlets

from ..core.errors import FabnbError
from ..qa.rating import ANCHORS, ANCHORS_SOURCE, MAX_COMMENT, RatingError
from ..qa.rating_app import RatingApp

__all__ = ['CorpusInspector', 'QACurator', 'RatingAppView', 'RatingPanel', 'ResultsExplorer', 'download_link',
           'rating_app']


def _asset(name: str) -> str:
    from ..core.paths import shipped

    return shipped("widgets", name)


def _jsonable(value):
    """Plain JSON types only (numpy scalars, tuples, NaN and timestamps converted)."""
    return json.loads(pd.Series([value]).to_json(orient="values", default_handler=str))[0]


class _View(anywidget.AnyWidget):
    saved = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.on_msg(lambda _widget, content, _buffers: self.handle(content))

    def set_state(self, sync_data):
        """Refuse every change of state the page sends: the page speaks through actions (:meth:`handle`) only.

        ipywidgets applies a comm ``update`` from the browser with this method, so without it a crafted message
        (``rater`` set to another name, say) would change what the kernel believes. A read-only trait does not
        stop that (ipywidgets applies browser state with ``set_trait``). A value equal to the kernel's own is
        let through silently (a page echoing what it was sent); any other is refused and said in the widget.
        """
        changed = sorted(k for k, v in (sync_data or {}).items() if k not in self.keys or v != getattr(self, k))
        if changed:
            self.error = (f"the page may not set {', '.join(changed)}; it sends actions, and the kernel keeps the "
                          "state. Reload the page.")

    def handle(self, content: dict) -> None:
        """Apply one front-end action; a failure is shown in the widget, never lost in a log."""
        action = content.get("action") if isinstance(content, dict) else None
        method = getattr(self, f"_do_{action}", None) if isinstance(action, str) else None
        if method is None:
            self.error = f"unknown action {action!r}"
            return
        try:
            method(content)
            self.error = ""
        except (RatingError, KeyError, ValueError, TypeError, OSError) as exc:
            # A front-end message of the wrong shape is shown in the widget, never raised into the kernel.
            self.error = str(exc).strip("'\"")

    def _stamp(self, what: str) -> None:
        self.saved = f"saved {what} at {time.strftime('%H:%M:%S')}"


class RatingPanel(_View):
    """Rate items on Appendix D's four dimensions (or label oracle verdicts 0/1), keyboard first.

    Keys: 1-5 (0-1 for verdicts) rate the highlighted dimension and move to the next; up / down choose a
    dimension; n / p next and previous item; u the next unrated item. Every score is
    written to the rater's file before the panel says "saved".

    Parameters
    ----------
    session : RatingSession

    Examples
    --------
    The front end sends actions; the model behind it stores them (no browser needed):

    >>> import tempfile
    >>> from fabnb.data.datasets import load_fab_bench
    >>> from fabnb.qa.rating import RatingSession, RatingStore, rating_items
    >>> store = RatingStore(tempfile.mkdtemp())
    >>> panel = RatingPanel(RatingSession(rating_items(list(load_fab_bench())[:2]), "ana", store))
    >>> panel.handle({"action": "rate", "dimension": "accuracy", "value": 4})
    >>> store.ratings()[["rater", "item_id", "dimension", "score"]].to_dict("records")
    [{'rater': 'ana', 'item_id': 'GEN_001', 'dimension': 'accuracy', 'score': 4}]
    """

    _esm = _asset("rating.js")
    _css = _asset("rating.css")
    #: The item's text fields the panel shows, per kind of session: (label, field, CSS class).
    FIELDS = {"rating": [("Question", "question", "fabnb-question"),
                         ("Reference answer", "ground_truth_answer", "fabnb-answer")],
              "verdict": [("Question", "question", "fabnb-question"),
                          ("Expected answer", "expected_answer", "fabnb-answer"),
                          ("Ground-truth evidence", "evidence", "fabnb-passage"),
                          ("Passages the system retrieved", "retrieved", "fabnb-passage"),
                          ("Answer to judge", "answer", "fabnb-judged")],
              "answer": [("Question", "question", "fabnb-question"),
                         ("Reference answer", "ground_truth_answer", "fabnb-answer"),
                         ("The context the system was given", "context", "fabnb-passage"),
                         ("The answer to score", "answer", "fabnb-judged"),
                         ("Rubric (FAB-Bench Appendix E; score each metric 0-10)", "rubric", "fabnb-rubric")]}

    rater = traitlets.Unicode("").tag(sync=True)
    fields = traitlets.List().tag(sync=True)
    blind = traitlets.Bool(True).tag(sync=True)
    dimensions = traitlets.List().tag(sync=True)
    scale = traitlets.List().tag(sync=True)
    anchors_source = traitlets.Unicode("").tag(sync=True)
    position = traitlets.Int(0).tag(sync=True)
    total = traitlets.Int(0).tag(sync=True)
    done = traitlets.Int(0).tag(sync=True)
    item = traitlets.Dict().tag(sync=True)
    scores = traitlets.Dict().tag(sync=True)
    comment = traitlets.Unicode("").tag(sync=True)
    max_comment = traitlets.Int(MAX_COMMENT).tag(sync=True)  # shown under the comment box; the store's limit

    def __init__(self, session, **kwargs):
        self.session = session
        resume = session.next_unrated()
        start = session.order.index(resume) if resume is not None else 0
        super().__init__(rater=session.rater, blind=session.blind, total=len(session.order),
                         fields=[list(f) for f in self.FIELDS[session.kind]],
                         dimensions=[{"name": d, "definition": m, "low": ANCHORS.get(d, ("", ""))[0],
                                      "high": ANCHORS.get(d, ("", ""))[1]} for d, m in session.dimensions.items()],
                         anchors_source=ANCHORS_SOURCE,
                         scale=list(range(session.scale[0], session.scale[1] + 1)), **kwargs)
        self._show(start)

    def _show(self, position: int) -> None:
        position = max(0, min(position, len(self.session.order) - 1))
        item_id = self.session.order[position]
        self.session.refresh()  # what another tab of this rater saved shows here too
        scores, comment = self.session.latest(item_id)
        self.item = {k: _jsonable(v) for k, v in self.session.view(item_id).items()}
        self.scores, self.comment = scores, comment
        self.done = self.session.progress()[0]
        self.position = position

    def _save(self, scores: dict, comment: str | None) -> None:
        """Store just the fields changed here: a field another tab saved meanwhile is kept, and shown."""
        item_id = self.session.order[self.position]
        self.session.rate(item_id, comment, **scores)
        self.session.refresh()
        self.scores, self.comment = self.session.latest(item_id)
        self.done = self.session.progress()[0]
        self._stamp(item_id)

    def _do_rate(self, c):
        dim, value = c.get("dimension"), c.get("value")
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        self._save({dim: value}, None)

    def _do_comment(self, c):
        self._save({}, str(c.get("text", "")))

    def _do_next(self, c):
        self._show(self.position + 1)

    def _do_prev(self, c):
        self._show(self.position - 1)

    def _do_goto(self, c):
        position = c.get("position", 0)
        if not isinstance(position, int) or isinstance(position, bool):
            raise ValueError(f"goto needs a whole-number position, not {position!r}")
        self._show(position)

    def _do_unrated(self, c):
        nxt = self.session.next_unrated()
        if nxt is None:
            self.saved = "every item is rated"
        else:
            self._show(self.session.order.index(nxt))

    def _do_download(self, c):
        # The session's rater, never the trait: what the page shows is not who the kernel let in.
        rater = self.session.rater
        ratings = self.session.store.ratings(kind=self.session.kind)
        csv = ratings[ratings["rater"] == rater].to_csv(index=False)
        self.send({"kind": "download", "filename": f"ratings-{rater}.csv", "content": csv})


class RatingAppView:
    """The rating app's page: a name prompt, then the rating panel of that rater. No code, nothing else.

    A thin view over :class:`fabnb.qa.rating_app.RatingApp` (which refuses an empty name, or a
    rater without a manifest when there are manifests); ``fabnb rate --serve`` shows it
    with Voilà. :meth:`enter` is what typing a name and pressing Enter does.

    Parameters
    ----------
    app : RatingApp

    Examples
    --------
    >>> import tempfile
    >>> view = RatingAppView(RatingApp.from_folders(None, tempfile.mkdtemp()))
    >>> type(view.enter("ana")).__name__  # the name prompt gives way to that rater's panel
    'RatingPanel'
    """

    def __init__(self, app: RatingApp):
        import ipywidgets

        self.app = app
        self.panel: RatingPanel | None = None
        self.error = ""  # the last refusal, as text
        self.name = ipywidgets.Text(placeholder="your name", description="Your name:", continuous_update=False)
        self.name.add_class("fabnb-rater-name")
        start = ipywidgets.Button(description="Start rating", button_style="primary")
        start.add_class("fabnb-start")
        intro = (f"{len(app.items)} QA pairs to rate on accuracy, relevance, difficulty and diversity (1-5). "
                 "Every score is saved the moment you give it: you can close this page and come back.")
        if app.problems is not None and len(app.problems):
            intro += f" ({len(app.problems)} QA file(s) could not be read and are left out.)"
        # Escaped: a message may quote a rater's name or a folder, shown as text and never as markup.
        self.message = ipywidgets.HTML("")
        self.message.add_class("fabnb-app-message")
        # Enter in the box (continuous_update=False sends the value then) or the button starts.
        self.name.observe(lambda change: self.enter(change["new"]), names="value")
        start.on_click(lambda _button: self.enter(self.name.value))
        self.widget = ipywidgets.VBox([ipywidgets.HTML(f"<h3>FAB-Bench QA rating</h3><p>{html.escape(intro)}</p>"),
                                       ipywidgets.HBox([self.name, start]), self.message])
        self.widget.add_class("fabnb-rating-app")

    def enter(self, rater: str) -> RatingPanel | None:
        """Start rating as ``rater``: the panel replaces the prompt; a refused name is said under it."""
        if self.panel is not None:
            return self.panel  # already started (the button after Enter, or leaving the box)
        try:
            session = self.app.start(rater)
        except (FabnbError, OSError, ValueError) as exc:  # every refusal shows under the box, never a blank page
            self.error = str(exc)
            # Wrapped: ipywidgets' HTML does not wrap, and a refusal's fix came at the end of one long line, off-screen.
            self.message.value = (f"<p style='color:#b00020; white-space: normal; overflow-wrap: anywhere; "
                                  f"max-width: 60em'>{html.escape(self.error)}</p>")
            return None
        self.panel = RatingPanel(session)
        self.widget.children = (self.panel,)
        return self.panel

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def rating_app(qa: str | Path | None = None, ratings: str | Path | None = None,
               manifests: str | Path | None = None, study: str | Path | None = None):
    """The rating app's page (what ``fabnb rate --serve`` shows, and the Binder app link).

    Each argument left out comes from the environment: ``FABNB_QA_DIR`` (unset: the
    released 200 FAB-Bench pairs), ``FABNB_RATINGS_DIR`` (unset: ``ratings`` here) and
    ``FABNB_MANIFESTS_DIR`` (unset: no assignments). ``study`` (or ``FABNB_STUDY_DIR``): a run
    folder whose judge-calibration study experts score instead. A folder that cannot be used gives
    a page that says what is wrong, not a traceback.

    Returns
    -------
    RatingAppView, or an ipywidgets.Label with the problem

    Examples
    --------
    >>> import tempfile
    >>> from fabnb.data.datasets import fab_bench_dir
    >>> app = rating_app(qa=fab_bench_dir() / "QAs", ratings=tempfile.mkdtemp())
    >>> type(app).__name__
    'RatingAppView'
    >>> type(rating_app(qa="/no/such/folder")).__name__  # a page that says what is wrong, not a traceback
    'Label'
    """
    import ipywidgets

    from ..qa.access import ACCESS_ENV, rater_of_link

    qa = qa or os.environ.get("FABNB_QA_DIR") or None
    ratings = ratings or os.environ.get("FABNB_RATINGS_DIR") or "ratings"
    manifests = manifests or os.environ.get("FABNB_MANIFESTS_DIR") or None
    study = study or os.environ.get("FABNB_STUDY_DIR") or None  # judged answers to score (fabnb rate --from)
    try:
        app = RatingApp.from_study(study) if study else RatingApp.from_folders(qa, ratings, manifests)
        view = RatingAppView(app)
        if os.environ.get(ACCESS_ENV):
            # Served beyond loopback: the server let this page through for a valid token; the kernel checks it
            # again (it sees only the query string) and opens that rater's panel, with no name prompt.
            rater = rater_of_link(os.environ.get("QUERY_STRING", ""), os.environ[ACCESS_ENV])
            if view.enter(rater) is None:
                raise FabnbError(view.error)
        return view
    except (FabnbError, OSError, ValueError) as exc:
        label = ipywidgets.Label(f"The rating app cannot start: {exc}")
        label.add_class("fabnb-app-message")
        return label


class QACurator(_View):
    """Keep, drop or edit candidate QA pairs toward target counts per test type.

    Keys: k keep (and next), d drop (and next), u undo (back to pending), n / p next and
    previous. Near-duplicates come one after another and are listed beside the item.

    Parameters
    ----------
    session : CurationSession
    export_to : path, optional
        Where the "export kept" button writes the FAB-Bench files.
    """

    _esm = _asset("curation.js")
    _css = _asset("curation.css")

    filters = traitlets.Dict().tag(sync=True)
    options = traitlets.Dict().tag(sync=True)
    ids = traitlets.List().tag(sync=True)
    position = traitlets.Int(0).tag(sync=True)
    item = traitlets.Dict().tag(sync=True)
    progress = traitlets.List().tag(sync=True)
    problems = traitlets.List().tag(sync=True)

    def __init__(self, session, export_to: str | Path = "curated", **kwargs):
        self.session = session
        self.export_to = Path(export_to)
        c = session.candidates
        options = {name: sorted(str(v) for v in c[name].dropna().unique())
                   for name in ("test_type", "question_format", "precision_level")}
        options["status"] = ["pending", "kept", "dropped"]
        super().__init__(options=options, problems=session.problems.to_dict("records"), **kwargs)
        self._select({})

    def _select(self, filters: dict, keep_id: str | None = None) -> None:
        self.filters = {k: v for k, v in filters.items() if v}
        self.ids = self.session.select(**self.filters)
        position = self.ids.index(keep_id) if keep_id in self.ids else 0
        self._show(position)

    def _show(self, position: int) -> None:
        self.progress = _jsonable(self.session.progress().to_dict("records"))
        if not self.ids:
            self.item, self.position = {}, 0
            return
        position = max(0, min(position, len(self.ids) - 1))
        self.item = _jsonable(self.session.item(self.ids[position]))
        self.position = position

    def _current(self) -> str:
        if not self.item:
            raise ValueError("no candidate selected: the filters match nothing.")
        return self.item["test_id"]

    def _decided(self, test_id: str, advance: bool) -> None:
        self._stamp(test_id)
        self._show(self.position + (1 if advance else 0))

    def _do_keep(self, c):
        self.session.keep(self._current())
        self._decided(self._current(), c.get("advance", True))

    def _do_drop(self, c):
        self.session.drop(self._current(), str(c.get("reason", "")))
        self._decided(self._current(), c.get("advance", True))

    def _do_reset(self, c):
        self.session.reset(self._current())
        self._decided(self._current(), False)

    def _do_edit(self, c):
        self.session.edit(self._current(), **{str(c.get("field")): c.get("value")})
        self._decided(self._current(), False)

    def _do_next(self, c):
        self._show(self.position + 1)

    def _do_prev(self, c):
        self._show(self.position - 1)

    def _do_filter(self, c):
        self._select({**self.filters, str(c.get("name")): c.get("value") or None},
                     self.item.get("test_id") if self.item else None)

    def _do_export(self, c):
        paths = self.session.export(self.export_to)
        self.saved = f"exported {len(paths)} kept pairs to {self.export_to}"


class CorpusInspector(_View):
    """Browse documents and chunks, search, and see knowledge-base terms by category.

    Keys: n / p next and previous chunk of the document; / focuses the search box.

    Parameters
    ----------
    session : CorpusSession
    """

    _esm = _asset("corpus.js")
    _css = _asset("corpus.css")

    documents = traitlets.List().tag(sync=True)
    doc_id = traitlets.Unicode("").tag(sync=True)
    chunks = traitlets.List().tag(sync=True)
    chunk = traitlets.Dict().tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)
    results = traitlets.List().tag(sync=True)

    def __init__(self, session, **kwargs):
        self.session = session
        super().__init__(documents=_jsonable(session.documents().to_dict("records")), **kwargs)
        first = session.chunks.iloc[0]
        self._open_doc(first["doc_id"])

    def _open_doc(self, doc_id: str, chunk_id: str | None = None) -> None:
        s = self.session.stats
        rows = s[s["doc_id"] == doc_id]
        if rows.empty:
            raise KeyError(f"no document {doc_id!r}")
        cols = ["chunk_id", "position", "precision_level", "technical_density", "flesch_reading_ease"]
        self.chunks = _jsonable(rows[cols].to_dict("records"))
        self.doc_id = doc_id
        self.chunk = _jsonable(self.session.chunk(chunk_id or rows["chunk_id"].iloc[0]))

    def _do_doc(self, c):
        self._open_doc(str(c.get("doc_id")))

    def _do_chunk(self, c):
        chunk_id = str(c.get("chunk_id"))
        doc = self.session.chunk(chunk_id)["doc_id"]
        self._open_doc(doc, chunk_id)

    def _step(self, delta: int) -> None:
        ids = [r["chunk_id"] for r in self.chunks]
        i = ids.index(self.chunk["chunk_id"]) + delta
        if 0 <= i < len(ids):
            self.chunk = _jsonable(self.session.chunk(ids[i]))

    def _do_next(self, c):
        self._step(1)

    def _do_prev(self, c):
        self._step(-1)

    def _do_search(self, c):
        self.query = str(c.get("query", ""))
        self.results = _jsonable(self.session.search(self.query).to_dict("records"))


class ResultsExplorer(_View):
    """A run's results in the notebook, drawn by fabnb's one results renderer (``widgets/results.js``, which also
    draws the static page, ``fabnb explore`` and JupyterLab's viewer): the summary, then every cell to filter,
    sort, open in full (question, expected answer, gold evidence, the retrieved passages in rank order with the
    gold ones marked, the answer, each metric's score and reason), set two configurations side by side, or
    download as CSV. Keys: j / k move, Enter opens, Esc closes, / finds, n / p page.

    The cells go to the browser at once (a compact row each: 8,800 at the paper's scale); the heavy texts go a
    part at a time when a cell is opened (:meth:`fabnb.views.page.PageData.part`). The page asks for a part by
    its name; any other message is refused.

    Parameters
    ----------
    explorer : Explorer or path
        :class:`fabnb.views.explorer.Explorer`, or an experiment's output folder (``fabnb run``), whose summary,
        figures, comparison and calibration are then shown too.
    """

    _esm = _asset("results.js") + _asset("results-widget.js")
    _css = _asset("results.css")

    summary = traitlets.Dict().tag(sync=True)
    cells = traitlets.Dict().tag(sync=True)

    def __init__(self, explorer, **kwargs):
        from .explorer import Explorer
        from .page import page_data

        folder = None if isinstance(explorer, Explorer) else Path(explorer)
        self.explorer = explorer if folder is None else Explorer.from_folder(folder)
        self.data = page_data(self.explorer, folder, figures="inline")
        super().__init__(summary=self.data.summary, cells=self.data.cells, **kwargs)

    def _do_load(self, c):
        name = c.get("name")
        if not isinstance(name, str):
            raise ValueError("a part's name must be a string: 'questions' or detail-NNNN")
        self.send({"name": name, "value": _jsonable(self.data.part(name))})


def download_link(path: str | Path):
    """A link that downloads ``path`` from the notebook: the file, or a folder as one zip archive.

    On Binder the session is temporary: this is how results leave it. A folder is zipped
    next to itself (``<folder>.zip``, replaced on each call). Jupyter serves files relative to
    the notebook's folder (its ``files/`` route), so the link is relative to the kernel's
    working folder; a file outside it (a folder under ``/tmp``, say) is zipped or copied into
    ``downloads/`` there first, since a link to it could never download.

    Returns
    -------
    IPython.display.FileLink
        Shown as a link in the notebook; its ``path`` (relative) is what downloads.

    Examples
    --------
    >>> import os, pathlib, tempfile
    >>> here = os.getcwd()
    >>> os.chdir(tempfile.mkdtemp())  # the notebook's folder
    >>> _ = pathlib.Path("summary.md").write_text("# results")
    >>> download_link("summary.md").path
    'summary.md'
    >>> os.chdir(here)
    """
    from IPython.display import FileLink  # lazy: only a notebook needs it

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist yet: run the cells above that write it first.")
    here = Path.cwd().resolve()
    inside = path.resolve().is_relative_to(here)
    if path.is_dir():
        target = path.resolve().parent / path.name if inside else here / "downloads" / path.resolve().name
        target.parent.mkdir(parents=True, exist_ok=True)
        path = Path(shutil.make_archive(str(target), "zip", root_dir=path))
    elif not inside:
        (here / "downloads").mkdir(exist_ok=True)
        path = Path(shutil.copy2(path, here / "downloads" / path.name))
    return FileLink(os.path.relpath(path.resolve(), here), result_html_prefix="Download: ")
