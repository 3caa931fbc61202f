"""The ``fabnb`` command line.

``fabnb reproduce --out DIR`` writes every figure, table and the claims report of the
FAB-Bench paper from its published numbers (or, with ``--scores FILE``, the same
analyses of a user's own score CSV).

``fabnb run FILE`` runs a whole experiment from a TOML file (``--dry-run``: the plan only);
run it again to resume.

``fabnb rate --serve --qa DIR --ratings DIR`` serves the code-free rating app (Voilà) on
loopback; without ``--serve`` it prints each rater's progress. ``fabnb rate --from RUN_DIR --sample N
--raters A,B`` draws a judge-calibration study of a run's answers, ``--serve --from RUN_DIR`` serves it to the
experts, and ``--from RUN_DIR`` alone calibrates the judge once they have scored (``fabnb.judge.calibration``).

``fabnb compare BASE CANDIDATE`` compares two run folders question by question and writes ``compare.md`` and
``compare.json``; ``--fail-on-regression`` makes it a gate for CI.

``fabnb export RUN_DIR --html OUT`` writes the run's results as a static page (``fabnb.views.page``).

``fabnb serve-local`` serves the embedded model on loopback until interrupted.

``fabnb doctor`` tells what works on this machine (exit status 1 when the default LLM
cannot answer).

Every command exits with a status of :data:`fabnb.core.exits.EXIT` (``fabnb --help`` lists them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import __version__
from .core.exits import EXIT, table

__all__ = ['build_parser', 'console', 'main', 'run_exit']


def _reproduce(args: argparse.Namespace) -> int:
    from .analysis.reproduction import reproduce
    from .core.scores import ScoreError, read_scores

    start = time.perf_counter()
    try:
        scores = read_scores(args.scores) if args.scores else None
    except ScoreError as exc:
        print(f"fabnb reproduce: {exc}", file=sys.stderr)
        return EXIT["usage"]
    formats = tuple(f for f in args.figures.split(",") if f.strip())
    try:
        result = reproduce(args.out, scores=scores, source=args.scores, figures=formats)
    except ValueError as exc:
        print(f"fabnb reproduce --figures: {exc}", file=sys.stderr)
        return EXIT["usage"]
    drawn = f"{len(result.figures)} figures ({', '.join(f.upper() for f in formats)})" if formats else "no figures"
    print(f"wrote {drawn} and {len(result.tables)} tables (CSV and Markdown) to {result.out_dir}")
    if result.claims is not None:
        counts = result.claims["verdict"].value_counts()
        print(f"claims: {len(result.claims)} checked: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    print(f"report: {result.report_md} and {result.report_html} ({time.perf_counter() - start:.1f} s)")
    return EXIT["ok"]


def _run(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .core.process import stop_on_signals
    from .experiment import ConfirmationNeeded, Experiment, run_experiment

    start = time.perf_counter()
    try:
        exp = Experiment.from_file(args.file, output=args.out)
        with stop_on_signals():  # SIGTERM (JupyterLab's Stop, or JupyterLab ending) stops it as Ctrl-C does
            run = run_experiment(exp, dry_run=args.dry_run, probe=not args.no_probe, progress=not args.no_progress,
                                 endpoint_moved=args.endpoint_moved or (), yes=args.yes)
    except ConfirmationNeeded as exc:
        print(f"fabnb run: {exc}", file=sys.stderr)
        return EXIT["confirm"]
    except FabnbError as exc:
        print(f"fabnb run: {exc}", file=sys.stderr)
        return EXIT["usage"]
    except KeyboardInterrupt as exc:
        # str(KeyboardInterrupt()) is empty, and an exception object is always true: say what stopped it.
        print(f"fabnb run: stopped ({str(exc) or 'Ctrl-C or SIGTERM'}); what was answered is kept: run it again to "
              "resume.", file=sys.stderr)
        _leave_abandoned_calls(EXIT["stopped"])
        return EXIT["stopped"]
    print(f"({time.perf_counter() - start:.1f} s)")
    return run_exit(run)


def _batch(args: argparse.Namespace) -> int:
    """``fabnb batch export|import|cancel``: a stage's requests for vLLM's run_batch, its output into the cache, and
    the run folder's open batches cancelled."""
    from .core.errors import FabnbError
    from .experiment import Experiment
    from .experiment.batching import cancel_batches, export_stage, import_stage

    if args.action != "cancel" and not args.path:
        print(f"fabnb batch {args.action}: give the file to {'write' if args.action == 'export' else 'read'} after "
              "the experiment file", file=sys.stderr)
        return EXIT["usage"]
    try:
        exp = Experiment.from_file(args.file, output=args.out)
        if args.action == "cancel":
            cancelled = cancel_batches(exp)
            print(f"cancelled {len(cancelled):,} open batches of {exp.output}; what they completed is billed and "
                  "kept: a rerun reads it and asks the rest")
            return EXIT["ok"]
        if args.action == "export":
            n = export_stage(exp, args.stage, args.path, args.system)
            print(f"wrote {n:,} {args.stage} requests to {args.path} (vLLM: python -m vllm.entrypoints.openai."
                  f"run_batch -i {args.path} -o results.jsonl --model ...; serve it under the file's model name)")
            return EXIT["ok"]
        runs = import_stage(exp, args.stage, args.path, args.system)
    except (FabnbError, OSError, ValueError) as exc:
        print(f"fabnb batch {args.action}: {exc}", file=sys.stderr)
        return EXIT["usage"]
    stored, left = sum(r.stored for r in runs), sum(len(r.left) for r in runs)
    print(f"stored {stored:,} replies in the response cache; {left:,} requests of the stage have none yet"
          + (" (an online run asks them)" if left else " (an online run asks nothing)"))
    return EXIT["ok"] if stored or not left else EXIT["failed_cells"]


def _leave_abandoned_calls(code: int) -> None:
    """A second stop abandoned the calls in flight (:func:`fabnb.rag.grid._finish_in_flight`): their threads
    would hold the interpreter's exit until each call ends, minutes on a slow model. Everything is stored and
    the manifest written by now, so leave at once."""
    import threading

    if any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_exit(run) -> int:
    """The exit status of a finished run (:data:`fabnb.core.exits.EXIT`): ok only when every cell is stored."""
    if run.status == "stopped-by-budget":
        return EXIT["budget"]
    return EXIT["failed_cells"] if run.status == "finished" and len(run.failures) else EXIT["ok"]


def _rate(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .qa.rating_app import RatingApp, serve_app

    try:
        raters = [r.strip() for r in (args.raters or "").split(",") if r.strip()] or None
        if args.sample is not None:
            return _draw_study(args, raters)
        if args.serve:
            return serve_app(args.qa, args.ratings, args.manifests, port=args.port, host=args.host, raters=raters,
                             url=args.url, study=args.study_run)
        app = RatingApp.from_study(args.study_run) if args.study_run else RatingApp.from_folders(args.qa, args.ratings,
                                                                                      args.manifests)
    except FabnbError as exc:
        print(f"fabnb rate: {exc}", file=sys.stderr)
        return EXIT["usage"]
    table = app.progress()
    print(f"{len(app.items)} items; ratings in {app.store.folder}")
    print(table.to_string(index=False) if len(table) else "no rater has rated yet")
    if args.study_run:
        return _calibration(args.study_run, app)
    print("serve the app with: fabnb rate --serve" + (f" --qa {args.qa}" if args.qa else "")
          + f" --ratings {args.ratings}" + (f" --manifests {args.manifests}" if args.manifests else ""))
    return EXIT["ok"]


def _calibration(run, app) -> int:
    """``fabnb rate --from RUN_DIR``: the study's progress, then (once experts have scored) the calibration."""
    from .core.errors import FabnbError
    from .core.stats import shown_interval
    from .judge.calibration import calibrate

    if not len(app.store.ratings(kind="answer")):
        print(f"no answer scored yet: serve the app with fabnb rate --serve --from {run}")
        return EXIT["ok"]
    try:
        result = calibrate(run)
    except FabnbError as exc:
        print(f"fabnb rate: {exc}", file=sys.stderr)
        return EXIT["usage"]
    for row in result["agreement"]:
        print(f"{row['metric']:<20} {row['statistic']:<16} "
              f"{shown_interval(row['value'], row['ci_low'], row['ci_high'], row['n_items'])} "
              f"({row['n_items']} answers, {row['n_raters']} raters)")
    for row in result["corrected_means"] or []:
        own = shown_interval(row["judge_mean"], row["judge_ci_low"], row["judge_ci_high"], row["n_cells"])
        ppi = shown_interval(row["estimate"], row["ci_low"], row["ci_high"], row["n_rated"])
        print(f"{row['metric']:<20} judge's mean {own}; prediction-powered {ppi}")
    for metric, verdict in result["verdicts"].items():
        print(f"{metric}: {'the judge may be used alone' if verdict['usable_alone'] else 'not alone'} "
              f"({verdict['why']})")
    print(f"wrote {Path(run) / 'calibration' / 'calibration.json'}")
    return EXIT["ok"]


def _draw_study(args: argparse.Namespace, raters) -> int:
    """``fabnb rate --from RUN_DIR --sample N --raters A,B``: draw a calibration sample of the run's judged answers
    and write the study (items, assignments) into its folder."""
    from .core.errors import FabnbError
    from .judge.calibration import draw_study
    from .views.explorer import Explorer

    if not args.study_run:
        print("fabnb rate --sample: name the run to sample with --from RUN_DIR.", file=sys.stderr)
        return EXIT["usage"]
    metrics = [m.strip() for m in (args.metrics or "").split(",") if m.strip()] or None
    try:
        questions = Explorer.from_folder(args.study_run).questions
        study = draw_study(args.study_run, args.sample, raters, questions, metrics=metrics, design=args.design,
                           per_item=args.per_item, seed=args.seed)
    except (FabnbError, FileNotFoundError) as exc:
        print(f"fabnb rate: {exc}", file=sys.stderr)
        return EXIT["usage"]
    print(f"drew {args.sample} of the run's judged answers ({args.design}, seed {args.seed}) for "
          f"{', '.join(raters)}; wrote {study}")
    print(f"serve the app with: fabnb rate --serve --from {args.study_run}")
    return EXIT["ok"]


def _compare(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .experiment.comparison import compare_runs

    systems = {}
    for pair in args.map or ():
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            print(f"fabnb compare --map {pair!r}: write BASE_NAME=CANDIDATE_NAME (a system renamed between the "
                  "runs).", file=sys.stderr)
            return EXIT["usage"]
        systems[old.strip()] = new.strip()
    try:
        comparison = compare_runs(args.base, args.candidate, systems=systems, allow=args.allow or (),
                                  metric=args.metric, margin=args.margin, pass_threshold=args.pass_threshold,
                                  require_calibrated_judge=args.require_calibrated_judge)
        md, js = comparison.write(args.out or args.candidate)
    except (FabnbError, OSError) as exc:
        print(f"fabnb compare: {exc}", file=sys.stderr)
        return EXIT["usage"]
    for notice in comparison.notices:
        print(f"note: {notice}")
    print(comparison.terminal())
    print(comparison.summary())
    print(f"verdict: {comparison.verdict()}; wrote {md} and {js}")
    return comparison.exit_code(args.fail_on_regression, args.fail_on_inconclusive)


def _history(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .core.files import write_whole
    from .experiment.history import history_markdown, run_history

    try:
        table = run_history(args.folder)
        if args.metric not in set(table["metric"]):
            raise ValueError(f"--metric {args.metric!r} is not scored in these runs; metrics: "
                             f"{', '.join(sorted(set(table['metric'])))}")
        out = Path(args.out or args.folder)
        out.mkdir(parents=True, exist_ok=True)
        write_whole(out / "history.csv", table.to_csv(index=False))
        md = history_markdown(table, args.metric)
        write_whole(out / "history.md", md + "\n")
        from matplotlib.figure import Figure

        from .analysis.plots import plot_history

        fig = Figure(figsize=(8, 4.5))
        plot_history(table, args.metric, ax=fig.add_subplot())
        fig.savefig(out / "history.png", dpi=120, bbox_inches="tight")
    except (FabnbError, ValueError, OSError) as exc:
        print(f"fabnb history: {exc}", file=sys.stderr)
        return EXIT["usage"]
    print(md)
    print(f"wrote {out / 'history.md'}, {out / 'history.csv'} (every metric) and {out / 'history.png'}")
    return EXIT["ok"]


def _export(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .views.page import export_page

    start = time.perf_counter()
    try:
        index = export_page(args.folder, args.html)
    except (FabnbError, FileNotFoundError, ValueError, OSError) as exc:
        print(f"fabnb export: {exc}", file=sys.stderr)
        return EXIT["usage"]
    print(f"wrote {index} ({time.perf_counter() - start:.1f} s): open it in a browser (file:// works) or copy the "
          "folder to any static host")
    return EXIT["ok"]


def _explore(args: argparse.Namespace) -> int:
    from .core.errors import FabnbError
    from .views.page import serve_results

    try:
        return serve_results(args.folder, port=args.port)
    except (FabnbError, FileNotFoundError) as exc:
        print(f"fabnb explore: {exc}", file=sys.stderr)
        return EXIT["usage"]


def _serve_local(args: argparse.Namespace) -> int:
    from .models.llm import LLMError
    from .models.local import serve

    try:
        serve(port=args.port, n_ctx=args.n_ctx)
    except LLMError as exc:
        print(f"fabnb serve-local: {exc}", file=sys.stderr)
        return EXIT["usage"]
    return EXIT["ok"]


def _doctor(args: argparse.Namespace) -> int:
    from .views.doctor import check, default_llm_ok, render

    start = time.perf_counter()
    table = check(model=not args.no_model, endpoint=not args.no_model)
    print(render(table))
    print(f"({time.perf_counter() - start:.1f} s)")
    if args.no_model:
        return EXIT["ok"]
    return EXIT["ok"] if default_llm_ok(table) else EXIT["check_failed"]


def _add_compare(sub) -> None:
    """``fabnb compare``'s arguments."""
    cmp = sub.add_parser("compare", help="compare two run folders question by question; a regression gate for CI",
                         epilog=table(), formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("base", help="the output folder of the earlier run (main's, say)")
    cmp.add_argument("candidate", help="the output folder of the run to judge")
    cmp.add_argument("--out", help="where compare.md and compare.json go (default: the candidate's folder)")
    cmp.add_argument("--map", action="append", metavar="OLD=NEW",
                     help="a system renamed between the runs; repeat for several")
    cmp.add_argument("--allow", action="append", choices=("questions", "judge"),
                     help="compare anyway when the questions (the shared ones are paired) or the judge differ")
    cmp.add_argument("--metric", default="average",
                     help="the primary metric the gate reads, pooled over windows and modes (default: %(default)s, "
                          "the mean of the judged metrics)")
    cmp.add_argument("--margin", type=float, default=0.02,
                     help="a regression is worse than -MARGIN with evidence (default: %(default)s)")
    cmp.add_argument("--pass-threshold", type=float, metavar="SCORE",
                     help="also test pass (score >= SCORE) with McNemar's exact test per metric and window")
    cmp.add_argument("--fail-on-regression", action="store_true",
                     help="exit 1 when the primary difference's interval lies wholly below -MARGIN")
    cmp.add_argument("--fail-on-inconclusive", action="store_true",
                     help="exit 6 when the questions are too few to tell")
    cmp.add_argument("--require-calibrated-judge", action="store_true",
                     help="refuse when a run's judge has no calibration against expert ratings")
    cmp.set_defaults(run=_compare)


def _add_rate(sub) -> None:
    """``fabnb rate``'s arguments: the QA-pair app, and the judge-calibration study of a run (``--from``)."""
    rate = sub.add_parser("rate", help="the rating app for experts (--serve), or each rater's progress")
    rate.add_argument("--serve", action="store_true", help="serve the app (Voilà) on 127.0.0.1 and print its URL")
    rate.add_argument("--qa", help="a folder of FAB-Bench-format QA files (default: the released 200 pairs)")
    rate.add_argument("--ratings", default="ratings", help="the raters' files (default: %(default)s)")
    rate.add_argument("--manifests", help="a folder of rater assignments (fabnb.qa.rating.write_manifests)")
    rate.add_argument("--port", type=int, help="port (default: a free one)")
    rate.add_argument("--host", default="127.0.0.1",
                      help="address to serve on (default: %(default)s); any other address serves only with a "
                           "personal token link per rater")
    rate.add_argument("--raters", metavar="NAMES", help="comma-separated raters who get a link (default: the "
                                                        "raters of --manifests)")
    rate.add_argument("--url", help="the address raters open, when it is not http://HOST:PORT/ (a reverse proxy "
                                    "with TLS, say): the links start with it")
    rate.add_argument("--from", dest="study_run", metavar="RUN_DIR",
                      help="a run folder: experts score its judged answers (judge calibration); with --sample, draw "
                           "the study; with --serve, serve it; alone, each rater's progress")
    rate.add_argument("--sample", type=int, metavar="N", help="draw N judged answers of --from's run to score")
    rate.add_argument("--design", choices=("uniform", "stratified"), default="uniform",
                      help="uniform (for corrected means, the default) or stratified (for agreement across systems, "
                           "windows, modes, test types and score bands)")
    rate.add_argument("--metrics", help="comma-separated metrics to score (default: every metric the run judged)")
    rate.add_argument("--per-item", type=int, default=2, help="raters per answer (default: %(default)s)")
    rate.add_argument("--seed", type=int, default=0, help="the draw's and the assignment's seed")
    rate.set_defaults(run=_rate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabnb", description="A research kit for adaptive RAG benchmarking.",
                                     epilog=table(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fabnb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="regenerate the paper's figures, tables and claim checks")
    rep.add_argument("--out", default="fabnb-reproduction", help="output folder (default: %(default)s)")
    rep.add_argument("--scores", metavar="CSV", help="analyse this score file instead of the published numbers")
    rep.add_argument("--figures", default="png,svg", metavar="FORMATS",
                     help="figure formats, comma-separated; '' draws none (default: %(default)s)")
    rep.set_defaults(run=_reproduce)
    run = sub.add_parser("run", help="run a whole experiment from a TOML file (plan, answers, judge, report)",
                         epilog=table(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("file", help="the experiment file (see examples/offline.toml)")
    run.add_argument("--dry-run", action="store_true", help="print the plan (calls, tokens, cost, time) and stop")
    run.add_argument("--out", help="output folder (default: the file's output)")
    run.add_argument("--no-probe", action="store_true", help="do not measure the endpoints with a probe call")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--yes", action="store_true",
                     help="start even when the plan is above the confirmation threshold (about $50 or 2 h unless "
                          "the file sets confirm_usd / confirm_hours)")
    run.add_argument("--endpoint-moved", action="append", metavar="SYSTEM",
                     help="this system's (or the judge's) server moved to a new address but is the same server: "
                          "keep its cells (recorded in the manifest); repeat for several")
    run.set_defaults(run=_run)
    _add_compare(sub)
    bat = sub.add_parser("batch", help="a stage's requests for vLLM's run_batch (export), its output into the "
                                       "response cache (import), the run's open batches cancelled (cancel)",
                         epilog=table(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    bat.add_argument("action", choices=("export", "import", "cancel"))
    bat.add_argument("file", help="the experiment file")
    bat.add_argument("path", nargs="?",
                     help="export: the request file to write; import: run_batch's output file to read")
    bat.add_argument("--stage", choices=("answers", "judge"), default="judge",
                     help="answers (the reference-kind systems) or judge (the stored answers'); default: %(default)s")
    bat.add_argument("--system", action="append", metavar="NAME", help="answers: only this system; repeat for several")
    bat.add_argument("--out", help="output folder (default: the file's output)")
    bat.set_defaults(run=_batch)
    his = sub.add_parser("history", help="a folder of runs as a history: each metric's trend with its intervals")
    his.add_argument("folder", help="a folder holding run folders (fabnb run's outputs)")
    his.add_argument("--metric", default="average", help="the metric history.md and the figure show (default: "
                                                            "%(default)s; history.csv holds them all)")
    his.add_argument("--out", help="where history.md, history.csv and history.png go (default: FOLDER)")
    his.set_defaults(run=_history)
    exo = sub.add_parser("export", help="a run's results as a static page: no server, opens from file://")
    exo.add_argument("folder", help="the output folder of fabnb run (with compare.json if fabnb compare wrote one)")
    exo.add_argument("--html", required=True, metavar="OUT", help="the page's folder (index.html, data/, figures/)")
    exo.set_defaults(run=_export)
    exp = sub.add_parser("explore", help="the results page of a run folder, served on 127.0.0.1 (a reload shows "
                                        "what the run wrote since)")
    exp.add_argument("folder", help="the output folder of fabnb run")
    exp.add_argument("--port", type=int, help="port (default: a free one)")
    exp.set_defaults(run=_explore)
    _add_rate(sub)
    loc = sub.add_parser("serve-local", help="serve the embedded Gemma 3 270M on 127.0.0.1 (OpenAI-compatible)")
    loc.add_argument("--port", type=int, help="port (default: a free one)")
    loc.add_argument("--n-ctx", type=int, default=8192, help="context window in tokens (default: %(default)s)")
    loc.set_defaults(run=_serve_local)
    doc = sub.add_parser("doctor", help="check what works on this machine (the embedded model, the endpoint, ...)")
    doc.add_argument("--no-model", action="store_true",
                     help="do not start the embedded model or call the endpoint (exit status 0)")
    doc.set_defaults(run=_doctor)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


def console() -> int:
    """The ``fabnb`` command (and ``python -m fabnb.cli``): :func:`main`, then an exit that does not wait.

    Everything a command writes is on disk when it returns (the stores are written to survive a SIGKILL), so the
    interpreter's last garbage collections are skipped (``gc.freeze``): with DeepEval imported they kept a finished
    run's process alive 1-2 s more, and JupyterLab's sidebar shows a run as ending until its process has ended.
    """
    import gc

    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console())
