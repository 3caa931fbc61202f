"""The code-free rating app: a rater names themself, then rates (:class:`RatingApp`), the page Voilà serves
(:func:`app_notebook`) and its server (:func:`serve_app`, ``fabnb rate --serve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .rating import RatingError, RatingSession, RatingStore, manifest_path, rater_key, rating_items, read_rater_manifest

__all__ = ["APP_CELL", "RatingApp", "app_notebook", "serve_app"]


@dataclass
class RatingApp:
    """What the code-free rating app does before the panel: the rater says who they are.

    The model behind ``fabnb rate --serve`` and :func:`fabnb.views.widgets.rating_app` (the view
    shows a name prompt, then :class:`fabnb.views.widgets.RatingPanel` over :meth:`start`'s session).

    Parameters
    ----------
    items : DataFrame
        :func:`rating_items`.
    store : RatingStore
    manifests : path, optional
        A folder of :func:`write_manifests` files: a rater then sees only their own items,
        and a name without a manifest is refused (naming the raters that have one).
    problems : DataFrame, optional
        QA files that did not load (path, message), shown on the first screen.
    seed, blind
        As in :class:`RatingSession`.

    Examples
    --------
    >>> import tempfile
    >>> items = pd.DataFrame({"item_id": ["q1", "q2"], "question": ["Why?", "How?"]})
    >>> app = RatingApp(items, RatingStore(tempfile.mkdtemp()))
    >>> app.start("  ana ").progress()
    (0, 2)
    >>> app.start("")
    Traceback (most recent call last):
    ...
    fabnb.qa.rating.RatingError: enter your name (letters, digits, '-' or '_') to start rating.
    """

    items: pd.DataFrame
    store: RatingStore
    manifests: str | Path | None = None
    problems: pd.DataFrame | None = None
    seed: int = 0
    blind: bool = True
    kind: str = "rating"
    dimensions: tuple | None = None

    @classmethod
    def from_study(cls, run: str | Path, **kwargs) -> "RatingApp":
        """The app over a judge-calibration study of a run folder (``calibration/``, written by
        :func:`fabnb.judge.calibration.write_study`): experts score the sampled answers on its metrics (0-10)."""
        import json

        study = Path(run) / "calibration"
        if not (study / "items.json").exists():
            raise RatingError(f"{run} has no calibration study ({study / 'items.json'} is missing); draw one first: "
                              f"fabnb rate --from {run} --sample N --raters A,B.")
        items = pd.read_json(study / "items.json", orient="records", dtype=False)
        settings = json.loads((study / "settings.json").read_text(encoding="utf-8"))
        return cls(items, RatingStore(study / "ratings"), study / "manifests", kind="answer",
                   dimensions=tuple(settings["metrics"]), **kwargs)

    @classmethod
    def from_folders(cls, qa: str | Path | None = None, ratings: str | Path = "ratings",
                     manifests: str | Path | None = None, **kwargs) -> "RatingApp":
        """The app over a folder of FAB-Bench-format QA files (None: the released 200 pairs)."""
        from ..data.datasets import load_fab_bench, read_qa_files

        if manifests is not None and not Path(manifests).is_dir():
            raise RatingError(f"{manifests}: no such folder of manifests; write them with write_manifests().")
        qa_set = read_qa_files(qa) if qa else load_fab_bench()
        if not qa_set.pairs:
            raise RatingError(f"{qa}: no QA pair could be read ({len(qa_set.problems)} file(s) with problems); "
                              "point --qa at a folder of FAB-Bench-format QA files.")
        return cls(rating_items(qa_set.pairs), RatingStore(ratings), manifests, qa_set.problems, **kwargs)

    def raters_with_manifest(self) -> list[str]:
        """The raters a manifest folder has an assignment for (empty without one)."""
        if self.manifests is None:
            return []
        return sorted(read_rater_manifest(p)["rater"] for p in Path(self.manifests).glob("*.json"))

    def progress(self) -> pd.DataFrame:
        """Every rater with a file or a manifest: rater, rated (items with every dimension), items.

        ``items`` is the rater's assignment when they have a manifest, else all the items.
        """
        assigned = set(self.raters_with_manifest())
        rows = []
        for rater in sorted(set(self.store.raters()) | assigned):
            manifest = manifest_path(self.manifests, rater) if rater in assigned else None
            done, total = RatingSession(self.items, rater, self.store, seed=self.seed, manifest=manifest,
                                        kind=self.kind, dimensions=self.dimensions).progress()
            rows.append({"rater": rater, "rated": done, "items": total})
        return pd.DataFrame(rows, columns=["rater", "rated", "items"])

    def start(self, rater: str) -> RatingSession:
        """The session of this rater (their manifest's items when there are manifests).

        Raises :class:`RatingError` for an empty or unusable name, or a rater without a manifest.
        """
        rater = (rater or "").strip()
        rater_key(rater)  # an empty or too long name says so here, before anything is written
        manifest = None
        if self.manifests is not None:
            path = manifest_path(self.manifests, rater)
            if not path.exists():
                known = self.raters_with_manifest()
                raise RatingError(f"no assignment for {rater!r} in {self.manifests}; raters with one: "
                                  f"{', '.join(known) or 'none'}. Check the spelling, or ask the study lead.")
            manifest = path
        return RatingSession(self.items, rater, self.store, seed=self.seed, blind=self.blind, manifest=manifest,
                             kind=self.kind, dimensions=self.dimensions)


#: The whole of the rating app's notebook: one cell, which Voilà runs and shows without its code.
APP_CELL = "from fabnb.views.widgets import rating_app\n\nrating_app()"


def app_notebook(path: str | Path) -> Path:
    """Write the rating app's notebook (:data:`APP_CELL`, no outputs) to ``path``; the repository's
    ``apps/rate.ipynb`` (the Binder link's page) is this file."""
    from ..core.pages import one_cell_notebook

    return one_cell_notebook(path, APP_CELL)


def serve_app(qa: str | Path | None = None, ratings: str | Path = "ratings", manifests: str | Path | None = None,
              port: int | None = None, echo=print, timeout: float = 60.0, host: str = "127.0.0.1",
              raters=None, url: str | None = None, study: str | Path | None = None) -> int:
    """Serve the rating app with Voilà until interrupted (``fabnb rate --serve``).

    The folders are checked here first, so a wrong one is said in the terminal, not on the
    page. On 127.0.0.1 the page shows a name prompt, then that rater's panel and progress;
    no code. On any other address (``host``) the app is served only with access control
    (:mod:`fabnb.qa.access`): each rater gets a personal link with a secret token, written to
    ``<ratings>/access/links.tsv`` (readable by its owner only) for the study lead to send
    out; a request without a valid token is refused, and a link opens its rater's panel only.

    Parameters
    ----------
    qa : path, optional
        A folder of FAB-Bench-format QA files (None: the released 200 pairs).
    ratings : path
        Where each rater's file is written (created).
    manifests : path, optional
        :func:`write_manifests`' folder: each rater sees only their items.
    port : int, optional
        Default: a free one.
    echo : callable
        Gets the line with the URL once the server answers.
    host : str
        The address to serve on (default: loopback only).
    raters : list of str, optional
        Who gets a link when ``host`` is not 127.0.0.1 (default: the raters of ``manifests``). Given on
        127.0.0.1 (a reverse proxy in front), they turn the token check on there too.
    url : str, optional
        Where raters reach the app, when it is not ``http://host:port/`` (behind a reverse proxy with TLS).
    study : path, optional
        A run folder with a judge-calibration study (``fabnb rate --serve --from RUN_DIR``): the experts score its
        sampled answers; ``qa``, ``ratings`` and ``manifests`` are the study's own.

    Returns
    -------
    int
        Voilà's exit status (0 after Ctrl-C).
    """
    import os

    from ..core.pages import PageError, serve_page
    from ..core.process import free_port
    from .access import ACCESS_ENV, issue_links, read_links

    if study is not None:
        app = RatingApp.from_study(study)  # a folder without a study fails here, with its name
        ratings, manifests = app.store.folder, app.manifests
    else:
        app = RatingApp.from_folders(qa, ratings, manifests)  # a bad folder fails here, with its name
    port = port or free_port(host)
    env = {k: v for k, v in os.environ.items()
           if k not in ("FABNB_QA_DIR", "FABNB_MANIFESTS_DIR", "FABNB_STUDY_DIR", ACCESS_ENV)}
    env["FABNB_RATINGS_DIR"] = str(Path(ratings).resolve())
    if study is not None:
        env["FABNB_STUDY_DIR"] = str(Path(study).resolve())
    if qa:
        env["FABNB_QA_DIR"] = str(Path(qa).resolve())
    if manifests:
        env["FABNB_MANIFESTS_DIR"] = str(Path(manifests).resolve())
    guarded = host != "127.0.0.1" or bool(raters)  # beyond loopback, or behind a proxy: tokens
    if guarded:
        links = issue_links(raters or app.raters_with_manifest(), url or f"http://{host}:{port}/",
                            Path(ratings) / "access")
        env[ACCESS_ENV] = str((links.parent / "access.json").resolve())
        who = ", ".join(r for r, _ in read_links(links))
        ready = (f"Rating app on {url or f'http://{host}:{port}/'} for {who}: each rater's personal link is in "
                 f"{links} (send each their own line; requests without a valid token are refused). Ratings go to "
                 f"{env['FABNB_RATINGS_DIR']}; Ctrl-C stops it.")
    else:
        ready = (f"Rating app: http://127.0.0.1:{port}/  ({len(app.items)} items; ratings go to "
                 f"{env['FABNB_RATINGS_DIR']}; Ctrl-C stops it)")
    args = ["--Voila.identity_provider_class=fabnb.qa.access.RaterIdentityProvider"] if guarded else []
    try:
        return serve_page(APP_CELL, env, port=port, host=host, voila_args=args, ready=ready, echo=echo,
                          timeout=timeout, name="rate")
    except PageError as exc:
        raise RatingError(str(exc)) from None
