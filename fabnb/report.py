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

from . import __version__, plots, published
from . import analysis as A
from .claims import VERDICTS, Paper, check_claims
from .schema import METRIC_LABELS

__all__ = ['Report', 'Reproduction', 'reproduce']


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
FIGURE_FORMATS = ("png", "svg")


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


def reproduce(out_dir: str | Path, scores: pd.DataFrame | None = None, source: str | None = None,
              figures: tuple | list = FIGURE_FORMATS) -> Reproduction:
    """Write every figure, table and the claims report of the paper to ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Created if missing; files in it with the same names are replaced.
    scores : DataFrame, optional
        A user's own score frame (checked, e.g. from :func:`fabnb.scores.read_scores`)
        to analyse instead of the paper's published numbers. The claims table is
        about the paper, so it is only made for the published numbers.
    source : str, optional
        Where ``scores`` came from, for the report.
    figures : sequence of str, default ``("png", "svg")``
        The formats each figure is saved in (any format matplotlib writes). Empty: no figure is drawn, and the
        tables, the claims and the report come in a fraction of the time.

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
    sweeps = data[data["context_k"].notna()]
    models = list(dict.fromkeys(sweeps["model"]))
    primary = [m for m in published.PRIMARY_MODELS if m in models] if is_paper else models
    main = sweeps[sweeps["model"].isin(primary)]

    report = Report("FAB-Bench reproduction" if is_paper else "fabnb analysis of a user's score file")
    report.text(f"Made by fabnb {__version__} (`fabnb reproduce`) from "
                + ("the paper's published tables (arXiv 2605.26476, Tables 1-21) as transcribed in fabnb/published."
                   if is_paper else f"{source or 'a score frame'}."))
    if not formats:
        report.text("Figures were not drawn for this report (figures = []); the tables below hold their numbers.")
    drawn = _Figures(figs, formats, report)
    claims = _claims_section(report, data, tabs) if is_paper else None
    _scaling_section(report, sweeps, primary, drawn, tabs)
    _crossover_section(report, main, primary, tabs)
    _diagnostics_section(report, main, sweeps, primary, is_paper, drawn, tabs)
    _framework_section(report, data[data["context_k"].isna()], drawn, tabs)
    _consistency_section(report, data, tabs)
    (out / "report.md").write_text(report.markdown(), encoding="utf-8")
    (out / "report.html").write_text(report.html(), encoding="utf-8")
    drawn_files = sorted(figs.glob(f"*.{formats[0]}")) if formats else []
    return Reproduction(out, out / "report.md", out / "report.html", drawn_files,
                        sorted(tabs.glob("*.csv")), claims)


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
    return claims


def _scaling_section(report: Report, sweeps: pd.DataFrame, primary: list, figs: _Figures, tabs: Path) -> None:
    """Context scaling (Section 4, Figure 3): log and S-curve fits, labels, operating points."""
    import matplotlib.pyplot as plt

    report.heading("Context scaling (Section 4, Figure 3)")
    log_fits = A.fit_log_curves(sweeps)
    logistic_fits = A.fit_logistic_curves(sweeps)
    labels = A.classify_scaling(sweeps)
    points = A.operating_points(sweeps)
    for name, frame in (("log_fits", log_fits), ("logistic_fits", logistic_fits),
                        ("scaling_labels", labels), ("operating_points", points)):
        _save_table(frame, tabs, name)

    def panels():
        fig, axes = plt.subplots(1, len(primary), figsize=(4.2 * len(primary), 3.8), sharey=True, squeeze=False)
        for ax, model in zip(axes[0], primary):
            plots.plot_scaling(sweeps, models=[model], ax=ax)
            label = labels.set_index("model").loc[model, "label"]
            ax.set_title(f"{model}\n({label})", fontsize=10)
            ax.legend(fontsize=7, loc="lower right")
        return axes[0][0]

    figs.draw("fig3_scaling_panels", "Average score against context window with log-curve fits (Figure 3).", panels)
    figs.draw("fig3_scaling_all_models", "All models on a log2 context axis, log-curve fits.",
              lambda: plots.plot_scaling(sweeps, logx=True))
    figs.draw("fig3_scaling_logistic", "The same with the saturating S-curve alternative.",
              lambda: plots.plot_scaling(sweeps, fit="logistic", logx=True))
    report.table(log_fits[["model", "n_points", "intercept", "slope", "slope_ci_low", "slope_ci_high", "r_squared",
                           "status", "reason"]], "Log-curve fits: score = intercept + slope x ln(context_k), 95% CI")
    report.table(labels[["model", "label", "rule", "start_fraction", "final_drop_pct", "log_r2", "logistic_r2",
                         "s_curve_preferred"]], "Scaling behaviour by the rule of analysis.classify_scaling")
    report.table(points.drop(columns=["metric", "fraction"]),
                 "Operating points (90% of peak; half-way = critical mass)")


def _crossover_section(report: Report, main: pd.DataFrame, primary: list, tabs: Path) -> None:
    """Crossovers and routing (Section 8.2)."""
    report.heading("Crossovers and routing (Section 8.2)")
    cross = []
    for i, a in enumerate(primary):
        for b in primary[i + 1:]:
            for method in ("observed", "log_fit"):
                cross.append(A.crossovers(main, a, b, method=method))
    cross = pd.concat(cross, ignore_index=True) if cross else pd.DataFrame()
    routing = A.routing_table(main) if len(primary) > 1 else pd.DataFrame()
    _save_table(cross, tabs, "crossovers")
    _save_table(routing, tabs, "routing")
    report.table(cross, "Where two models' curves cross (observed: interpolated in ln context; log_fit: fitted curves)")
    report.table(routing, "Best model per context window, and the runs each wins")


def _diagnostics_section(report: Report, main: pd.DataFrame, sweeps: pd.DataFrame, primary: list, is_paper: bool,
                         figs: _Figures, tabs: Path) -> None:
    """Metric diagnostics (Section 5; Figures 4, 5, 6, 8; Table 4)."""
    report.heading("Metric diagnostics (Section 5)")
    contexts = sorted(main["context_k"].unique())
    lo, hi = (4.0, 28.0) if is_paper else (contexts[0], contexts[-1])
    for k, fig_name, caption in ((lo, "fig4_breakdown_low", "Figure 4"), (hi, "fig5_breakdown_high", "Figure 5")):
        figs.draw(fig_name, f"Metric breakdown at {k:g}K ({caption}).",
                  lambda k=k: plots.plot_breakdown(main, k, models=primary))
        profile = A.metric_profile(main, k)
        _save_table(profile, tabs, f"profile_{k:g}k")
        report.table(profile, f"Six-metric profiles at {k:g}K, with balance (range, std)")
    gaps = A.metric_gaps(main, lo)
    _save_table(gaps, tabs, f"metric_gaps_{lo:g}k")
    d0, d1 = (28.0, 32.0) if is_paper else (contexts[-2], contexts[-1]) if len(contexts) > 1 else (None, None)
    if d0 is not None:
        deltas = A.dilution(main, d0, d1)
        _save_table(deltas, tabs, f"dilution_{d0:g}k_{d1:g}k")
        figs.draw("fig6_deltas_score", f"Metric change {d0:g}K → {d1:g}K in score units (Figure 6).",
                  lambda: plots.plot_deltas(deltas, models=primary[::-1]))
        figs.draw("fig6_deltas_relative", "The same as relative change (%), as Section 5.4's text reports it.",
                  lambda: plots.plot_deltas(deltas, value="relative_pct", models=primary[::-1]))
        report.table(deltas.drop(columns=["from_k", "to_k"]),
                     "Attention dilution: delta (score), percentage points and relative %")
    _correlation_section(report, main, sweeps, is_paper, figs, tabs)
    if is_paper:
        radar = A.metric_profile(main, 18)
        figs.draw("fig8_radar_18k", "Radar of the primary models' average profiles at 18K. Figure 8 plots the "
                  "single case MULTI_069 at 18K, whose six scores no table publishes (Table 6 gives only "
                  "Factuality), so this radar shows the models' averages at the same context instead.",
                  lambda: plots.plot_radar(radar, title="Six-metric profiles at 18K (model averages)"))


def _correlation_section(report: Report, main: pd.DataFrame, sweeps: pd.DataFrame, is_paper: bool, figs: _Figures,
                         tabs: Path) -> None:
    """Inter-metric correlations (Table 4): pooled and per model; against the published table for the paper."""
    import matplotlib.pyplot as plt

    pearson = A.metric_correlations(main)
    spearman = A.metric_correlations(main, method="spearman")
    by_model = pd.concat([A.metric_correlations(main, by="model"),
                          A.metric_correlations(main, method="spearman", by="model")], ignore_index=True)
    _save_table(pd.concat([pearson, spearman], ignore_index=True), tabs, "correlations_pooled")
    _save_table(by_model, tabs, "correlations_by_model")
    if not is_paper:
        figs.draw("correlations", "Inter-metric Pearson correlations over all configurations.",
                  lambda: plots.plot_correlations(pearson))
        report.table(pearson, "Pooled Pearson correlations with p-values")
        return
    comparison = A.compare_correlations(pearson, published.correlations())
    comparison["r_computed_all_39"] = A.compare_correlations(
        A.metric_correlations(sweeps), published.correlations())["r_computed"]
    comparison["spearman_33"] = A.compare_correlations(spearman, published.correlations())["r_computed"]
    _save_table(comparison, tabs, "table4_comparison")

    def side_by_side():
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        plots.plot_correlations(published.correlations(), ax=axes[0], title="Table 4 as published")
        plots.plot_correlations(pearson, ax=axes[1], title="Recomputed from Tables 17-19 (33 configs)")
        return axes[0]

    figs.draw("table4_correlations", "Inter-metric Pearson correlations: published against recomputed.",
              side_by_side)
    report.table(comparison, "Table 4 against the correlations its own Tables 17-19 give "
                             "(Pearson over the 33 primary configurations; also over all 39, and Spearman)")


def _framework_section(report: Report, systems: pd.DataFrame, figs: _Figures, tabs: Path) -> None:
    """Cross-framework evaluation (Section 6, Table 5, Figure 7), where the scores have framework rows."""
    if systems.empty:
        return
    report.heading("Cross-framework evaluation (Section 6)")
    table5 = A.framework_table(systems).reset_index(names="metric")
    table5["metric"] = table5["metric"].map(lambda m: METRIC_LABELS.get(m, m))
    _save_table(table5, tabs, "frameworks")
    figs.draw("fig7_frameworks", "Six metrics per RAG framework (Figure 7).", lambda: plots.plot_frameworks(systems))
    report.table(table5, "Cross-framework table with reported and recomputed averages (Table 5)")


def _consistency_section(report: Report, data: pd.DataFrame, tabs: Path) -> None:
    """Reported averages against their six metrics, and the definitions the report uses."""
    checks = A.check_averages(data)
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
                "Scaling labels: cold-start if the first score is below 60% of the peak; early saturation if the "
                "final score is more than 1% below the peak or the last doubling gained less than 2% of the peak; "
                "logarithmic growth if neither and the log curve's R² >= 0.85.")
