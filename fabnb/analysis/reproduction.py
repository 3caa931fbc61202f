"""The reproduction report: every figure, table and claim check, written to a folder.

:func:`reproduce` is what ``fabnb reproduce --out DIR`` runs. It reads the paper's
published numbers (or a user's own score file), runs the analyses, and writes::

    DIR/figures/*.png, *.svg     every figure kind of the paper
    DIR/tables/*.csv, *.md       every analysis table
    DIR/report.md, report.html   the report, its centrepiece the claims table

It runs offline in seconds and makes no network call.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import __version__
from ..core.schema import AVERAGE, METRIC_LABELS, SCORE_KEYS
from ..core.scores import ScoreError, with_average
from ..data import published
from . import comparison as C
from . import curves as A
from . import metrics as M
from . import plots
from .claims import VERDICTS, Paper, check_claims
from .intervals import mean_intervals, mode_gap

__all__ = ['FEW_QUESTIONS', 'Report', 'Reproduction', 'reproduce']


@dataclass
class Report:
    """A report as a list of blocks, rendered to Markdown and to HTML alike."""

    title: str
    blocks: list[tuple] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", level, text))

    def text(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, frame: pd.DataFrame, caption: str = "") -> None:
        self.blocks.append(("table", frame, caption))

    def figure(self, name: str, caption: str) -> None:
        self.blocks.append(("img", name, caption))

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for block in self.blocks:
            if block[0] == "h":
                out += ["#" * block[1] + " " + block[2], ""]
            elif block[0] == "p":
                out += [block[1], ""]
            elif block[0] == "table":
                if block[2]:
                    out += [f"*{block[2]}*", ""]
                out += [_markdown_table(block[1]), ""]
            else:
                out += [f"![{block[2]}](figures/{block[1]}.png)", "", f"*{block[2]}*", ""]
        return "\n".join(out)

    def html(self) -> str:
        body = []
        for block in self.blocks:
            if block[0] == "h":
                body.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
            elif block[0] == "p":
                body.append(f"<p>{html.escape(block[1])}</p>")
            elif block[0] == "table":
                cap = f"<caption>{html.escape(block[2])}</caption>" if block[2] else ""
                body.append(_html_table(block[1], cap))
            else:
                src = html.escape(f"figures/{block[1]}.svg")
                body.append(f'<figure><img src="{src}" alt="{html.escape(block[2])}">'
                            f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
        return _HTML.format(title=html.escape(self.title), body="\n".join(body))


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }} caption {{ text-align: left; font-style: italic; padding: 4px 0; }}
td.reproduced {{ background: #e3f4e3; }} td.not-reproduced {{ background: #fbe3e3; font-weight: bold; }}
td.not-checkable {{ background: #f4f0dc; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }} figcaption {{ font-style: italic; font-size: 0.9em; }}
</style></head><body><h1>{title}</h1>
{body}
</body></html>
"""


def _cell(value) -> str:
    if isinstance(value, float):
        if pd.isna(value):
            return ""
        return f"{value:.4g}" if abs(value) >= 1 or value == 0 else f"{value:.4f}"
    return str(value)


def _markdown_table(frame: pd.DataFrame) -> str:
    shown = frame.map(_cell)
    shown = shown.map(lambda s: s.replace("|", "\\|").replace("\n", " "))
    return shown.to_markdown(index=False)


def _html_table(frame: pd.DataFrame, caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for _, row in frame.iterrows():
        cells = []
        for col, value in row.items():
            css = f' class="{value.replace(" ", "-")}"' if col == "verdict" else ""
            cells.append(f"<td{css}>{html.escape(_cell(value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _save_table(frame: pd.DataFrame, folder: Path, name: str) -> None:
    frame.to_csv(folder / f"{name}.csv", index=False)
    (folder / f"{name}.md").write_text(_markdown_table(frame) + "\n", encoding="utf-8")


#: The formats :func:`reproduce` writes each figure in, unless told otherwise.
REPRODUCE_FORMATS = ("png", "svg")


@dataclass
class _Figures:
    """Where the report's figures go and in which formats; no formats draws none (and costs nothing)."""

    folder: Path
    formats: tuple
    report: Report

    def draw(self, name: str, caption: str, make) -> None:
        """Call ``make()`` (it returns an Axes of a new figure), save that figure in each format, close it, and
        put it in the report. pyplot's backend is left as it is, so a notebook keeps drawing inline."""
        if not self.formats:
            return
        import matplotlib.pyplot as plt

        fig = make().figure
        try:
            fig.tight_layout()
            for ext in self.formats:
                fig.savefig(self.folder / f"{name}.{ext}", dpi=130, metadata={"Date": None} if ext == "svg" else None)
        finally:
            plt.close(fig)  # a figure drawn for a file is not shown again by the notebook
        self.report.figure(name, caption)


def _savable_formats() -> set:
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())


@dataclass
class Reproduction:
    """What :func:`reproduce` wrote: the folder, the report paths and the claims table."""

    out_dir: Path
    report_md: Path
    report_html: Path
    figures: list[Path]
    tables: list[Path]
    claims: pd.DataFrame | None

    def _repr_markdown_(self) -> str:
        """What a notebook shows for it: what was written where, the report as a link (relative to the kernel's
        folder, where Jupyter serves it), not a bare path."""
        import os

        def rel(path: Path) -> str:
            return os.path.relpath(Path(path).resolve(), Path.cwd().resolve())

        lines = [f"Wrote **{len(self.figures)} figure file(s)** and **{len(self.tables)} table(s)** to "
                 f"`{rel(self.out_dir)}`; the report: [{rel(self.report_html)}]({rel(self.report_html)}) "
                 f"(and `{Path(self.report_md).name}`).", ""]
        if self.claims is not None and len(self.claims):
            counts = self.claims["verdict"].value_counts()
            lines.append("Claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".")
        names = sorted({Path(f).stem for f in self.figures})
        if names:
            lines += ["", "Figures: " + ", ".join(f"`{n}`" for n in names) + "."]
        return "\n".join(lines)


def reproduce(out_dir: str | Path, scores: pd.DataFrame | None = None, source: str | None = None,
              figures: tuple | list = REPRODUCE_FORMATS, *, min_windows: int = A.MIN_FIT_WINDOWS,
              n_boot: int | None = None, seed: int | None = None) -> Reproduction:
    """Write every figure, table and the claims report of the paper to ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Created if missing; files in it with the same names are replaced.
    scores : DataFrame, optional
        A user's own score frame (checked, e.g. from :func:`fabnb.core.scores.read_scores`)
        to analyse instead of the paper's published numbers. The claims table is
        about the paper, so it is only made for the published numbers. With per-question
        scores (a ``test_id`` column) every mean gets a bootstrap interval over questions
        (tables, error bars, crossovers); with a ``mode`` column holding A and B, the
        analyses are of mode A, mode B's are in ``mode-B/``, and the report has the B - A table.
    source : str, optional
        Where ``scores`` came from, for the report.
    figures : sequence of str, default ``("png", "svg")``
        The formats each figure is saved in (any format matplotlib writes). Empty: no figure is drawn, and the
        tables, the claims and the report come in a fraction of the time.
    min_windows : int
        Windows a curve needs for its fit, behaviour label, operating points and crossovers
        (:data:`fabnb.analysis.curves.MIN_FIT_WINDOWS`); below, the report says how many it has.
    n_boot, seed : int, optional
        Bootstrap draws and seed of the intervals (:data:`fabnb.core.stats.N_BOOT`, :data:`fabnb.core.stats.SEED`).

    Returns
    -------
    Reproduction

    Examples
    --------
    >>> import tempfile
    >>> run = reproduce(tempfile.mkdtemp(), figures=())  # the paper's own tables; figures=() draws none
    >>> run.report_md.name, len(run.tables) >= 10, run.figures, run.claims["verdict"].value_counts().idxmax()
    ('report.md', True, [], 'reproduced')
    """
    formats = tuple(figures)
    unknown = [f for f in formats if not isinstance(f, str) or f.lower() not in _savable_formats()]
    if unknown:
        raise ValueError(f"reproduce(figures=...): {unknown} not formats matplotlib writes; use some of "
                         f"{sorted(_savable_formats())}, or () for no figures.")
    out = Path(out_dir)
    figs, tabs = out / "figures", out / "tables"
    figs.mkdir(parents=True, exist_ok=True)
    tabs.mkdir(parents=True, exist_ok=True)
    is_paper = scores is None
    data = published.scores() if is_paper else scores
    stats = {"n_boot": n_boot, "seed": seed}
    has_flags = "flagged" in data.columns
    if has_flags:  # per-question scores of a run, each marked where it raised a judge sanity flag
        data, flags, unflagged = _without_flagged(out, data, source, min_windows, stats)
    modes = sorted(set(data["mode"].dropna())) if "mode" in data.columns else []
    gap = None
    if len(modes) > 1:
        # Both modes: the analyses are of A (the system's own retrieval), B's have a report of their own, and the
        # difference is tabled here.
        first, *others = ["A", *[m for m in modes if m != "A"]] if "A" in modes else modes
        for other in others:
            reproduce(out / f"mode-{other}", data[data["mode"] == other], f"{source or 'a score frame'}, mode {other}",
                      formats, min_windows=min_windows, **stats)
        if "test_id" in data.columns:
            gap = mode_gap(data, **stats)
        data = data[data["mode"] == first]
    per_question = None
    if "test_id" in data.columns:
        per_question = data
        keys = [c for c in SCORE_KEYS if c in data.columns and c != "test_id"] + ["metric"]
        data = data.assign(score=data["score"].astype(float)).groupby(keys, dropna=False)["score"].mean(
            ).reset_index()
        data = with_average(data)
    sweeps = data[data["context_k"].notna()]
    models = list(dict.fromkeys(sweeps["model"]))
    primary = [m for m in published.PRIMARY_MODELS if m in models] if is_paper else models
    main = sweeps[sweeps["model"].isin(primary)]
    intervals = mean_intervals(per_question, **stats) if per_question is not None else None

    report = Report("FAB-Bench reproduction" if is_paper else "fabnb analysis of a user's score file")
    report.text(f"Made by fabnb {__version__} (`fabnb reproduce`) from "
                + ("the paper's published tables (arXiv 2605.26476, Tables 1-21) as transcribed in "
                   "fabnb/data/published." if is_paper else f"{source or 'a score frame'}."))
    if not formats:
        report.text("Figures were not drawn for this report (figures = []); the tables below hold their numbers.")
    if has_flags:
        report.text(_flag_line(flags, unflagged))
    drawn = _Figures(figs, formats, report)
    claims = _claims_section(report, data, tabs) if is_paper else None
    if intervals is not None:
        _interval_section(report, intervals, tabs)
    if gap is not None:
        _mode_gap_section(report, gap, others, drawn, tabs)
    _scaling_section(report, sweeps, primary, drawn, tabs, 3 if is_paper else min_windows, intervals,
                     per_question, stats)
    # The primary models' per-question scores: what routing, dilution and the metric gaps pair over questions.
    main_questions = per_question[per_question["model"].isin(primary)] if per_question is not None else None
    _crossover_section(report, main, primary, tabs, 3 if is_paper else min_windows, intervals, main_questions, stats)
    _diagnostics_section(report, main, sweeps, primary, is_paper, drawn, tabs, intervals, main_questions, stats)
    _framework_section(report, data[data["context_k"].isna()], drawn, tabs)
    _consistency_section(report, data, tabs)
    if has_flags and int(flags["flagged"].sum()):
        _flag_section(report, flags, unflagged, tabs)
    (out / "report.md").write_text(report.markdown(), encoding="utf-8")
    (out / "report.html").write_text(report.html(), encoding="utf-8")
    drawn_files = sorted(figs.glob(f"*.{formats[0]}")) if formats else []
    return Reproduction(out, out / "report.md", out / "report.html", drawn_files,
                        sorted(tabs.glob("*.csv")), claims)


def _without_flagged(out: Path, data: pd.DataFrame, source: str | None, min_windows: int, stats: dict):
    """The scores without their ``flagged`` column, the flags counted per system, and the whole report again
    without the flagged scores in ``out/without-flagged`` (None when too little is left)."""
    marked = data["flagged"].fillna(False).astype(bool)
    data = data.drop(columns="flagged")
    unflagged = None
    if marked.any() and (~marked).any():
        try:
            unflagged = reproduce(out / "without-flagged", data[~marked],
                                  f"{source or 'a score frame'}, without its flagged scores", (),
                                  min_windows=min_windows, **stats)
        except (ScoreError, ValueError, KeyError, IndexError):
            unflagged = None  # too little left to analyse: the flag section says so
    return data, _flag_counts(data.assign(flagged=marked)), unflagged


def _flag_counts(data: pd.DataFrame) -> pd.DataFrame:
    """Per system (model) and mode: the per-question scores, those flagged, and their share."""
    keys = [c for c in ("model", "mode") if c in data.columns]
    counts = data.groupby(keys, dropna=False)["flagged"].agg(scores="size", flagged="sum").reset_index()
    return counts.assign(share=(counts["flagged"] / counts["scores"]).round(3))


def _flag_line(flags: pd.DataFrame, unflagged) -> str:
    total, flagged = int(flags["scores"].sum()), int(flags["flagged"].sum())
    if not flagged:
        return "**Judge sanity flags**: none of the scores raised one (fabnb.judge.sanity)."
    worst = flags.sort_values("share", ascending=False).iloc[0]
    return (f"**Judge sanity flags**: {flagged:,} of {total:,} per-question scores ({flagged / total:.0%}) raised one "
            f"(most: {worst['model']}, {worst['share']:.0%} of its scores). Every table below counts them; the last "
            "section says, table by table, what changes without them"
            + (" (the full tables: [without-flagged/report.md](without-flagged/report.md))." if unflagged else
               "; without them nothing is left to analyse."))


def _changed(ours: Path, theirs: Path, name: str, key: list, value: str) -> str | None:
    """How many rows of table ``name`` change ``value`` between two reports' tables (matched on ``key``); for a
    number, the largest change."""
    def read(path: Path) -> pd.DataFrame:
        try:
            return pd.read_csv(path) if path.exists() else pd.DataFrame()
        except pd.errors.EmptyDataError:
            return pd.DataFrame()

    x, y = read(ours / f"{name}.csv"), read(theirs / f"{name}.csv")
    if x.empty:
        return None
    if y.empty:
        return f"{len(x)} rows here, none without them"
    if value not in x.columns or value not in y.columns or not set(key) <= set(x.columns) & set(y.columns):
        return None
    both = x[key + [value]].merge(y[key + [value]], on=key, how="outer", suffixes=("", "_without"))
    def number(col: pd.Series) -> bool:
        # a yes/no column (mode_gap's claimed) is numeric to pandas but has no size of change
        return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)

    if number(both[value]) and number(both[f"{value}_without"]):
        moved = (both[f"{value}_without"] - both[value]).abs()
        return (f"{int(moved.notna().sum())} of {len(both)} in both, the largest change {moved.max():.3f}"
                if moved.notna().any() else None)
    diff = both[value].astype(str) != both[f"{value}_without"].astype(str)
    return f"{int(diff.sum())} of {len(both)} change"


def _flag_section(report: Report, flags: pd.DataFrame, unflagged, tabs: Path) -> None:
    """The judge's sanity flags per system, and each decision of this report recomputed without flagged scores."""
    _save_table(flags, tabs, "flag_counts")
    report.heading("Judge sanity flags: each table without them")
    report.table(flags, "Per-question scores raising a judge sanity flag (fabnb.judge.sanity), per system and mode")
    if unflagged is None:
        report.text("Without the flagged scores too little is left to analyse: every decision above rests on them.")
        return
    theirs = unflagged.out_dir / "tables"
    lines = []
    for name, key, value, what in (("mean_intervals", ["model", "context_k", "metric"], "mean", "means"),
                                   ("scaling_labels", ["model"], "label", "scaling labels"),
                                   ("routing", ["context_k"], "winner", "window winners"),
                                   ("mode_gap", ["model", "context_k", "metric"], "claimed", "B - A claims")):
        changed = _changed(tabs, theirs, name, key, value)
        if changed:
            lines.append(f"- {what} ({name}.csv): {changed}")
    report.text("Without the flagged scores ([without-flagged/report.md](without-flagged/report.md), its tables in "
                "without-flagged/tables/):\n" + "\n".join(lines) if lines else
                "Without the flagged scores no table above has a row to compare.")


def _interval_section(report: Report, intervals: pd.DataFrame, tabs: Path) -> None:
    """Every cell mean with its bootstrap interval over questions."""
    _save_table(intervals, tabs, "mean_intervals")
    report.heading("Means with 95% intervals")
    report.text("Each mean is over questions (replicates averaged first), with a 95% interval over questions "
                "(fabnb.core.stats.cell_means: Student's t below 100 questions, the percentile bootstrap from there). "
                "Two means whose intervals overlap are "
                "not shown to differ. A cell of one question has no interval.")
    wide = intervals.pivot_table(index=[c for c in ("model", "context_k") if c in intervals.columns],
                                 columns="metric", values="shown", aggfunc="first").reset_index()
    wide.columns.name = None
    report.table(wide, "Mean [95% interval] per system, window and metric")


#: Below this many questions a table whose every difference is within noise says so in one line, with the size a
#: difference would need, instead of leaving the reader a wall of "within noise".
FEW_QUESTIONS = 10


def _nothing_passes(table: pd.DataFrame, claimed: str, low: str, high: str, what: str) -> str | None:
    """One plain line when no row of a family table is claimed and its questions are few: how large a difference
    would have to be to pass here, and what would change that; None otherwise."""
    if table.empty or claimed not in table.columns or "n" not in table.columns:
        return None
    n = pd.to_numeric(table["n"], errors="coerce").median()
    if table[claimed].fillna(False).astype(bool).any() or pd.isna(n) or n >= FEW_QUESTIONS:
        return None
    half = ((table[high] - table[low]) / 2).median()
    size = f"about ±{half:.3f}" if pd.notna(half) else "more than the scores vary (no interval could be drawn)"
    return (f"**Nothing in this table passes.** With {n:g} questions per comparison, {what} would have to exceed "
            f"{size} (the median half-width of its intervals) to be claimed, and none does. "
            "Four times as many questions halve that; this table cannot settle any of its rows as it is.")


def _mode_gap_section(report: Report, gap: pd.DataFrame, others: list, figs: _Figures, tabs: Path) -> None:
    """Mode B - mode A per system and window: paired over questions."""
    _save_table(gap, tabs, "mode_gap")
    report.heading("Dual mode: gold context (B) against own retrieval (A), Appendix F.3")
    report.text("delta is the mean over the questions scored in both modes of (B - A), with its paired 95% interval "
                "over those questions (unadjusted; fabnb.core.stats.cell_means); b_better is the share of them where "
                "B scored higher. A gap is claimed where its Holm-adjusted paired p is below 0.05, the rows of one "
                "metric one family (fabnb.core.stats.FAMILY_METHOD): a claimed positive delta says retrieval lost "
                "what the gold context held. The analyses below are of mode A; "
                + ", ".join(f"mode {m}'s are in [mode-{m}/report.md](mode-{m}/report.md)" for m in others) + ".")
    shown = gap[gap["metric"] == AVERAGE] if (gap["metric"] == AVERAGE).any() else gap
    plain = _nothing_passes(shown, "claimed", "ci_low", "ci_high", "a B - A gap")
    if plain:
        report.text(plain)
    report.table(shown.drop(columns=[c for c in ("system", "output_k") if c in shown.columns]),
                 "B - A per system and window (average of the judged metrics; every metric in tables/mode_gap.csv)")
    if len(shown):
        figs.draw("mode_gap", "Mode B - mode A against context, with paired 95% intervals.",
                  lambda: plots.plot_mode_gap(gap))


def _claims_section(report: Report, data: pd.DataFrame, tabs: Path) -> pd.DataFrame:
    """The claims table: the paper's text against its own tables."""
    claims = check_claims(Paper(data))
    counts = claims["verdict"].value_counts()
    report.heading("Claims: the paper's text against its own tables")
    report.text(
        f"{len(claims)} numeric claims of the paper's text (Sections 3.3-8.2 and the tables they summarise), each "
        "recomputed from the published tables: "
        + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + ". "
        "A claim is reproduced when the recomputed value is within the stated tolerance (the rounding of the "
        "printed value unless the row says otherwise). Where a claim does not come back, both numbers are shown; "
        "no computation was adjusted to match."
    )
    failed = claims[claims["verdict"] != "reproduced"]
    report.table(failed[["claim_id", "claim", "claimed", "computed", "verdict", "how"]],
                 "Claims not reproduced (or not checkable) from the paper's tables")
    report.table(claims[["claim_id", "section", "claim", "claimed", "computed", "difference", "tolerance",
                         "verdict", "how"]], "Every claim")
    _save_table(claims, tabs, "claims")
    _tester_claims_section(report, tabs)
    return claims


def _tester_claims_section(report: Report, tabs: Path) -> None:
    """RAG-TESTER's claims against its own published numbers (:func:`fabnb.tester.claims.check_tester_claims`)."""
    from ..tester.claims import check_tester_claims

    claims = check_tester_claims()
    counts = claims["verdict"].value_counts()
    report.heading("Claims: RAG-TESTER's numbers against each other")
    report.text(f"{len(claims)} claims of RAG-TESTER's abstract and results, as its review reads them, recomputed "
                "from its published numbers (fabnb/data/published/rag_tester.csv, each with its base and source): "
                + ", ".join(f"{counts.get(v, 0)} {v}" for v in ("reproduced", "not reproduced", "not checkable"))
                + ". A claim whose table was not published is not checkable here; a [tests] run checks it on the "
                "run's own systems.")
    report.table(claims, "RAG-TESTER's claims")
    _save_table(claims, tabs, "tester_claims")


def _scaling_section(report: Report, sweeps: pd.DataFrame, primary: list, figs: _Figures, tabs: Path,
                     min_windows: int, intervals: pd.DataFrame | None, per_question: pd.DataFrame | None = None,
                     stats: dict | None = None) -> None:
    """Context scaling (Section 4, Figure 3): log and S-curve fits, labels, operating points; only for curves with
    ``min_windows`` windows or more. Labels from ``per_question`` scores (where given) need their intervals."""
    report.heading("Context scaling (Section 4, Figure 3)")
    windows = sweeps.groupby("model", sort=False)["context_k"].nunique()
    fitted = sweeps[sweeps["model"].map(windows) >= min_windows]
    short = windows[windows < min_windows]
    if len(short):
        report.text("; ".join(f"{m}: not enough windows to fit ({n} of {min_windows})" for m, n in short.items())
                    + f". A fit, its behaviour label and operating points need {min_windows} windows or more "
                    "(fabnb.analysis.curves.MIN_FIT_WINDOWS, docs/statistics.md says why); add windows to the "
                    "experiment to get them. The means are in the tables above and in the figure, with their "
                    "intervals.")
    log_fits = A.fit_log_curves(fitted)
    logistic_fits = A.fit_logistic_curves(fitted)
    labelled = sweeps if per_question is None else per_question[per_question["context_k"].notna()]
    labels = A.classify_scaling(labelled, min_windows=min_windows, **(stats or {}))
    points = A.operating_points(fitted)
    for name, frame in (("log_fits", log_fits), ("logistic_fits", logistic_fits),
                        ("scaling_labels", labels), ("operating_points", points)):
        _save_table(frame, tabs, name)

    def panels():
        import matplotlib.pyplot as plt  # here, not above: a report without figures never imports pyplot

        fig, axes = plt.subplots(1, len(primary), figsize=(4.2 * len(primary), 3.8), sharey=True, squeeze=False)
        for ax, model in zip(axes[0], primary):
            plots.plot_scaling(sweeps, models=[model], ax=ax, intervals=intervals, min_windows=min_windows)
            label = labels.set_index("model").loc[model, "label"]
            ax.set_title(f"{model}\n({label})", fontsize=10)
            ax.legend(fontsize=7, loc="lower right")
        return axes[0][0]

    bars = " Error bars: 95% intervals over questions." if intervals is not None else ""
    # The captions name a fit only where one is drawn (a model needs min_windows windows for it).
    drawn = ("with log-curve fits" if len(fitted) else
             f"the points joined, no fit drawn (fewer than {min_windows} windows)")
    figs.draw("fig3_scaling_panels", f"Average score against context window, {drawn} (Figure 3)." + bars,
              panels)
    figs.draw("fig3_scaling_all_models", f"All models on a log2 context axis, {drawn}." + bars,
              lambda: plots.plot_scaling(sweeps, logx=True, intervals=intervals, min_windows=min_windows))
    figs.draw("fig3_scaling_logistic", "The same with the saturating S-curve alternative"
              + ("." if len(fitted) else f" (none drawn: fewer than {min_windows} windows)."),
              lambda: plots.plot_scaling(sweeps, fit="logistic", logx=True, min_windows=min_windows))
    if len(log_fits):
        report.table(log_fits[["model", "n_points", "intercept", "slope", "slope_ci_low", "slope_ci_high",
                               "r_squared", "status", "reason"]],
                     "Log-curve fits: score = intercept + slope x ln(context_k), 95% CI")
    if per_question is None:
        report.table(labels[["model", "label", "rule", "start_fraction", "final_drop_pct", "log_r2", "logistic_r2",
                             "s_curve_preferred"]],
                     "Scaling behaviour by the paper's point rule (analysis.classify_scaling on one "
                     "value per window: no per-question scores, so no interval)")
    else:
        level = labels["ci"].dropna()
        report.text(f"A label only where the intervals carry it (analysis.classify_scaling): each interval over the "
                    f"questions scored at every window, at {level.iloc[0]:.1%} each "
                    f"({len(labels)} curves, two decisions each, Bonferroni: 95% for the table) where any is drawn; "
                    "a plateau or a "
                    f"flat curve needs its gain's interval inside ±{A.PLATEAU_DELTA:g}; anything else is "
                    "\"undetermined\"." if len(level) else "No curve has questions scored at every window.")
        report.table(labels[[c for c in ("model", "label", "rule", "n_questions", "slope", "slope_ci_low",
                                         "slope_ci_high", "log_r2", "s_curve_preferred") if c in labels.columns]],
                     "Scaling behaviour, from intervals over questions")
    if len(points):
        report.table(points.drop(columns=["metric", "fraction"]),
                     "Operating points (90% of peak; half-way = critical mass)")


def _crossover_section(report: Report, main: pd.DataFrame, primary: list, tabs: Path, min_windows: int,
                       intervals: pd.DataFrame | None, per_question: pd.DataFrame | None = None,
                       stats: dict | None = None) -> None:
    """Crossovers and routing (Section 8.2): crossings of curves with ``min_windows`` windows or more; with
    intervals, claimed only where the curves' intervals separate on both sides."""
    report.heading("Crossovers and routing (Section 8.2)")
    windows = main.groupby("model")["context_k"].nunique()
    long = [m for m in primary if windows.get(m, 0) >= min_windows]
    cross = []
    for i, a in enumerate(long):
        for b in long[i + 1:]:
            for method in ("observed", "log_fit"):
                cross.append(C.crossovers(main, a, b, method=method, intervals=intervals))
    cross = pd.concat(cross, ignore_index=True) if cross else pd.DataFrame()
    routing = C.routing_table(main, per_question=per_question, **(stats or {})) if len(primary) > 1 else pd.DataFrame()
    _save_table(cross, tabs, "crossovers")
    _save_table(routing, tabs, "routing")
    if len(primary) < 2:
        report.text(f"Crossovers and routing compare two systems or more; these scores have {len(primary)}.")
        return
    if len(long) < 2:
        report.text(f"No crossover is read: it needs two curves of {min_windows} windows or more.")
    if intervals is not None and len(cross):
        noise = int((~cross["separated"].astype(bool)).sum())
        report.text(f"{noise} of {len(cross)} crossings lie within the noise (the two curves' intervals do not "
                    "separate on both sides) and are not claimed; the column separated says which.")
    report.table(cross, "Where two models' curves cross (observed: interpolated in ln context; log_fit: fitted curves)")
    if "winner" in routing.columns:
        won = int((routing["winner"] != "within noise").sum())
        report.text(f"A window has a winner where the leader's paired difference from the runner-up, over the "
                    f"questions both answered, is claimed: Holm over the table's {len(routing)} windows, p < 0.05 "
                    f"(fabnb.core.stats.FAMILY_METHOD); its interval is at {routing['ci_level'].iloc[0]:.1%} "
                    f"(Bonferroni). {won} of {len(routing)} windows have one"
                    + ("; route by the winners only." if won else "; nothing here supports a routing rule."))
        plain = _nothing_passes(routing.assign(claimed=routing["winner"] != "within noise"), "claimed",
                                "margin_ci_low", "margin_ci_high", "a leader's margin")
        if plain:
            report.text(plain)
    report.table(routing, "Best model per context window, and the runs each wins")


def _diagnostics_section(report: Report, main: pd.DataFrame, sweeps: pd.DataFrame, primary: list, is_paper: bool,
                         figs: _Figures, tabs: Path, intervals: pd.DataFrame | None = None,
                         per_question: pd.DataFrame | None = None, stats: dict | None = None) -> None:
    """Metric diagnostics (Section 5; Figures 4, 5, 6, 8; Table 4); with per-question scores, the gaps between
    metrics and the dilution deltas paired over questions, each table one family."""
    stats = stats or {}
    report.heading("Metric diagnostics (Section 5)")
    contexts = sorted(main["context_k"].unique())
    lo, hi = (4.0, 28.0) if is_paper else (contexts[0], contexts[-1])
    for k, fig_name, caption in ((lo, "fig4_breakdown_low", "Figure 4"), (hi, "fig5_breakdown_high", "Figure 5")):
        figs.draw(fig_name, f"Metric breakdown at {k:g}K ({caption})."
                  + (" Error bars: 95% bootstrap intervals over questions." if intervals is not None else ""),
                  lambda k=k: plots.plot_breakdown(main, k, models=primary, intervals=intervals))
        profile = M.metric_profile(main, k)
        _save_table(profile, tabs, f"profile_{k:g}k")
        report.table(profile, f"Six-metric profiles at {k:g}K, with balance (range, std)")
    gaps = M.metric_gaps(main, lo, per_question=per_question, **stats)
    _save_table(gaps, tabs, f"metric_gaps_{lo:g}k")
    if "claimed" in gaps.columns:
        claimed = gaps[gaps["claimed"].fillna(False).astype(bool) & (gaps["gap"] > 0)]
        report.text(f"Gaps between metrics at {lo:g}K, paired over questions (tables/metric_gaps_{lo:g}k.csv; Holm "
                    "over each model's 15 pairs): "
                    + ("; ".join(f"{r.model}: {r.metric_a} above {r.metric_b} by {r.gap:.3f} "
                                 f"[{r.gap_ci_low:.3f}, {r.gap_ci_high:.3f}]" for r in claimed.itertuples())
                       if len(claimed) else "none is claimed") + ".")
    d0, d1 = (28.0, 32.0) if is_paper else (contexts[-2], contexts[-1]) if len(contexts) > 1 else (None, None)
    if d0 is not None:
        deltas = M.dilution(main, d0, d1, per_question=per_question, **stats)
        _save_table(deltas, tabs, f"dilution_{d0:g}k_{d1:g}k")
        uncoloured = (" Cells are coloured only where the paired change is claimed (Holm over the table, p < 0.05); "
                      "grey cells are within the noise, their value printed." if "claimed" in deltas.columns else "")
        figs.draw("fig6_deltas_score", f"Metric change {d0:g}K → {d1:g}K in score units (Figure 6).{uncoloured}",
                  lambda: plots.plot_deltas(deltas, models=primary[::-1]))
        figs.draw("fig6_deltas_relative", "The same as relative change (%), as Section 5.4's text reports it."
                  + uncoloured, lambda: plots.plot_deltas(deltas, value="relative_pct", models=primary[::-1]))
        plain = _nothing_passes(deltas, "claimed", "delta_ci_low", "delta_ci_high", "a change between the windows")
        if plain:
            report.text(plain)
        report.table(deltas.drop(columns=["from_k", "to_k"]),
                     "Attention dilution: delta (score), percentage points and relative %"
                     + ("; with the change paired over questions, its interval and claim" if uncoloured else ""))
    _correlation_section(report, main, sweeps, is_paper, figs, tabs)
    if is_paper:
        radar = M.metric_profile(main, 18)
        figs.draw("fig8_radar_18k", "Radar of the primary models' average profiles at 18K. Figure 8 plots the "
                  "single case MULTI_069 at 18K, whose six scores no table publishes (Table 6 gives only "
                  "Factuality), so this radar shows the models' averages at the same context instead.",
                  lambda: plots.plot_radar(radar, title="Six-metric profiles at 18K (model averages)"))


def _correlation_section(report: Report, main: pd.DataFrame, sweeps: pd.DataFrame, is_paper: bool, figs: _Figures,
                         tabs: Path) -> None:
    """Inter-metric correlations (Table 4): pooled and per model; against the published table for the paper."""
    pearson = M.metric_correlations(main)
    spearman = M.metric_correlations(main, method="spearman")
    by_model = pd.concat([M.metric_correlations(main, by="model"),
                          M.metric_correlations(main, method="spearman", by="model")], ignore_index=True)
    _save_table(pd.concat([pearson, spearman], ignore_index=True), tabs, "correlations_pooled")
    _save_table(by_model, tabs, "correlations_by_model")
    if not is_paper:
        few = pearson[~pearson["enough"]]
        if len(few):
            report.text(f"{len(few)} of {len(pearson)} metric pairs have fewer than {M.MIN_CORRELATION_N} "
                        f"configurations (n = {int(few['n'].max())} at most): their cells read \"too few\" and are "
                        "not coloured (fabnb.analysis.metrics.MIN_CORRELATION_N, docs/statistics.md). More windows, "
                        "systems or modes give more configurations.")
        figs.draw("correlations", "Inter-metric Pearson correlations over all configurations, on the full -1 to 1 "
                  "scale.", lambda: plots.plot_correlations(pearson))
        shown = pearson.assign(r=pearson["r"].where(pearson["enough"]),
                               p_value=pearson["p_value"].where(pearson["enough"]),
                               shown=[f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}] (n = {n}, Holm p = {p:.3g})" if ok
                                      else f"too few (n = {n})" for r, lo, hi, n, p, ok in
                                      zip(pearson["r"], pearson["r_ci_low"], pearson["r_ci_high"], pearson["n"],
                                          pearson["p_holm"], pearson["enough"])])
        report.table(shown[["metric_a", "metric_b", "shown", "r", "p_value", "p_holm", "n"]],
                     f"Pooled Pearson correlations: r [95% Fisher-z interval, unadjusted] with n and p; the "
                     f"{len(pearson)} pairs are one family, Holm-adjusted (docs/statistics.md). The configurations "
                     "share questions and systems, so they are not independent draws: read p as a screen.")
        return
    comparison = M.compare_correlations(pearson, published.correlations())
    comparison["r_computed_all_39"] = M.compare_correlations(
        M.metric_correlations(sweeps), published.correlations())["r_computed"]
    comparison["spearman_33"] = M.compare_correlations(spearman, published.correlations())["r_computed"]
    _save_table(comparison, tabs, "table4_comparison")

    def side_by_side():
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        plots.plot_correlations(published.correlations(), ax=axes[0], title="Table 4 as published", scale="paper")
        plots.plot_correlations(pearson, ax=axes[1], title="Recomputed from Tables 17-19 (33 configs)", scale="paper")
        return axes[0]

    figs.draw("table4_correlations", "Inter-metric Pearson correlations: published against recomputed, in the "
              "paper's styling (0.5 to 1), where every published and recomputed coefficient lies.", side_by_side)
    report.table(comparison, "Table 4 against the correlations its own Tables 17-19 give "
                             "(Pearson over the 33 primary configurations; also over all 39, and Spearman)")


def _framework_section(report: Report, systems: pd.DataFrame, figs: _Figures, tabs: Path) -> None:
    """Cross-framework evaluation (Section 6, Table 5, Figure 7), where the scores have framework rows."""
    if systems.empty:
        return
    report.heading("Cross-framework evaluation (Section 6)")
    table5 = C.framework_table(systems).reset_index(names="metric")
    table5["metric"] = table5["metric"].map(lambda m: METRIC_LABELS.get(m, m))
    _save_table(table5, tabs, "frameworks")
    figs.draw("fig7_frameworks", "Six metrics per RAG framework (Figure 7).", lambda: plots.plot_frameworks(systems))
    report.table(table5, "Cross-framework table with reported and recomputed averages (Table 5)")


def _consistency_section(report: Report, data: pd.DataFrame, tabs: Path) -> None:
    """Reported averages against their six metrics, and the definitions the report uses."""
    checks = M.check_averages(data)
    _save_table(checks, tabs, "average_consistency")
    report.heading("Internal consistency")
    report.text(f"{int(checks['consistent'].sum())} of {len(checks)} reported averages equal the mean of their six "
                "metrics within 0.001 (the rounding of three-decimal tables).")
    report.table(checks[~checks["consistent"]] if (~checks["consistent"]).any() else checks.head(0),
                 "Reported averages that differ from the mean of their six metrics")
    report.heading("Definitions")
    report.text("Log curve: OLS of score on ln(context in K tokens). S-curve: 4-parameter logistic in ln(context). "
                "Critical mass: first context covering half the way from the first score to the peak. "
                "Context at 90% of peak: first tabulated context reaching it (interpolated value beside it). "
                "Crossover: sign change of the score difference, interpolated linearly in ln(context). "
                "Scaling labels of per-question scores: by intervals over questions (analysis.classify_scaling: "
                "cold-start, decline, flat, early saturation or logarithmic growth only where an interval carries it, "
                "else undetermined). Scaling labels of the published cell means: cold-start if the first score is "
                "below 60% of the peak; early saturation if the final score is more than 1% below the peak or the "
                "last doubling gained less than 2% of the peak; logarithmic growth if neither and the log curve's "
                "R² >= 0.85.")
