"""A whole FAB-Bench experiment from one TOML file: plan, cost, run, resume, report (``fabnb run FILE``).

The file names the questions, the corpus, the systems (the reference RAG over any
OpenAI-compatible endpoint, the embedded model, or one of the framework adapters), the
context windows and modes, the judge, prices and a budget, and the output folder.
:func:`plan` counts the calls and estimates tokens, cost and time without answering
anything; :func:`run_experiment` runs the stages (answers, judge scores, reference
checks, report) into the output folder and can be killed and run again at any point: it
repeats no finished call. Keys are named by environment variable, never written in the
file, and never reach the folder.

The subjects, one module each:

- :mod:`~fabnb.experiment.fields`: the file's keys, types and ranges, :class:`ExperimentError`;
- :mod:`~fabnb.experiment.systems`: the system kinds, endpoints and settings (:class:`SystemSpec`);
- :mod:`~fabnb.experiment.config`: the file, one spec per TOML table (:class:`Experiment`);
- :mod:`~fabnb.experiment.prices`: the price table as data, and costs;
- :mod:`~fabnb.experiment.planning`: the plan (:func:`plan`, :class:`Plan`);
- :mod:`~fabnb.experiment.output`: the folder, its manifest, the resume check, tallies;
- :mod:`~fabnb.experiment.progress`: a run's live state (its marker, ``progress.json``, :func:`run_status`);
- :mod:`~fabnb.experiment.run`: the run, one function per stage (:func:`run_experiment`);
- :mod:`~fabnb.experiment.report`: ``summary.md`` and ``report/``;
- :mod:`~fabnb.experiment.testing`: ``[tests]``, RAG-TESTER's stages from the same file (:func:`run_tests`);
- :mod:`~fabnb.experiment.comparison`: two runs compared, and the regression gate (``fabnb compare``);
- :mod:`~fabnb.experiment.history`: a folder of runs as each metric's trend (``fabnb history``).

Examples
--------
>>> exp = Experiment.from_dict({"name": "demo", "output": "out",
...                             "systems": [{"name": "local", "kind": "reference", "model": "embedded"}],
...                             "contexts": {"windows": [0.5, 1]}})
>>> exp.windows, exp.modes, [s.name for s in exp.systems]
((0.5, 1.0), ('A',), ['local'])
>>> Experiment.from_dict({"name": "demo", "sytems": []})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fabnb.experiment.fields.ExperimentError: <dict>: unknown key 'sytems' at the top level; allowed: ..., systems, tests.
"""

from .batching import (
                     ROUNDS,
                     batch_requests,
                     cancel_batches,
                     collect_answers,
                     collect_judge,
                     export_stage,
                     import_stage,
                     prefill_answers,
                     prefill_judge,
                     refuse_without_routes,
)
from .comparison import (
                     ALLOWABLE,
                     Comparison,
                     ComparisonError,
                     compare_runs,
                     compare_scores,
                     read_run,
                     run_differences,
)
from .config import (
                     MAX_WINDOWS,
                     RANGES,
                     ContextsSpec,
                     CorpusSpec,
                     Endpoint,
                     Experiment,
                     ExperimentError,
                     JudgeSpec,
                     QuestionsSpec,
                     ReportSpec,
                     SystemSpec,
                     TestsSpec,
                     prices_from_table,
                     systems_from_tables,
)
from .fields import FIGURE_FORMATS, check_range, check_table, no_duplicates, resolve_path
from .history import HISTORY_COLUMNS, history_markdown, run_folders, run_history
from .output import (
                     FAILURE_COLUMNS,
                     TALLY_COLUMNS,
                     ExperimentRun,
                     check_output,
                     column_sum,
                     failures,
                     questions_hash,
                     read_manifest,
                     record_failure,
                     spent,
                     stored,
                     stores,
                     tally,
                     write_json,
                     write_manifest,
)
from .planning import (
                     CONFIRM_HOURS,
                     CONFIRM_USD,
                     PLAN_COLUMNS,
                     PROBE_COLUMNS,
                     PROBES_FILE,
                     ConfirmationNeeded,
                     Plan,
                     PlanInputs,
                     keep_probes,
                     kept_probes,
                     plan,
                     prepare_systems,
                     probe_endpoints,
)
from .prices import PRICES, batch_cost, batch_price_of, cost_of, price_of, price_text
from .progress import (
                     MARKER,
                     PROGRESS,
                     RUN_STATES,
                     STATE_LABELS,
                     ProgressFile,
                     find_runs,
                     progress_bar,
                     read_progress,
                     run_status,
                     write_marker,
)
from .report import (
                     COVERAGE_COLUMNS,
                     FEW_QUESTIONS,
                     ReportFiles,
                     caveats,
                     coverage,
                     question_scores,
                     scores_by_question,
                     write_report,
)
from .run import run_experiment
from .systems import grid_tables
from .testing import (
                     TABLES_FOLDER,
                     TESTS_STORE,
                     VERDICTS_STORE,
                     corpus_for_tests,
                     plan_tests,
                     run_tests,
                     stored_tests,
                     suite_failures,
                     suite_tables,
                     suite_tally,
                     tested_configurations,
                     write_tests_report,
)
from .windows import summary_sections, window_sections

__all__ = ["ALLOWABLE", "CONFIRM_HOURS", "CONFIRM_USD", "COVERAGE_COLUMNS", "Comparison", "ComparisonError",
           "ConfirmationNeeded", "ContextsSpec", "CorpusSpec", "Endpoint", "Experiment", "ExperimentError",
           "ExperimentRun", "FAILURE_COLUMNS", "FEW_QUESTIONS", "FIGURE_FORMATS", "HISTORY_COLUMNS", "JudgeSpec",
           "MARKER", "MAX_WINDOWS", "PLAN_COLUMNS", "PRICES", "PROBES_FILE", "PROBE_COLUMNS", "PROGRESS", "Plan",
           "PlanInputs", "ProgressFile", "QuestionsSpec", "RANGES", "ROUNDS", "RUN_STATES", "ReportFiles", "ReportSpec",
           "STATE_LABELS", "SystemSpec", "TABLES_FOLDER", "TALLY_COLUMNS", "TESTS_STORE", "TestsSpec", "VERDICTS_STORE",
           "batch_cost", "batch_price_of", "batch_requests", "cancel_batches", "caveats", "check_output", "check_range",
           "check_table", "collect_answers", "collect_judge", "column_sum", "compare_runs", "compare_scores",
           "corpus_for_tests", "cost_of", "coverage", "export_stage", "failures", "find_runs", "grid_tables",
           "history_markdown", "import_stage", "keep_probes", "kept_probes", "no_duplicates", "plan", "plan_tests",
           "prefill_answers", "prefill_judge", "prepare_systems", "price_of", "price_text", "prices_from_table",
           "probe_endpoints", "progress_bar", "question_scores", "questions_hash", "read_manifest", "read_progress",
           "read_run", "record_failure", "refuse_without_routes", "resolve_path", "run_differences", "run_experiment",
           "run_folders", "run_history", "run_status", "run_tests", "scores_by_question", "spent", "stored",
           "stored_tests", "stores", "suite_failures", "suite_tables", "suite_tally", "summary_sections",
           "systems_from_tables", "tally", "tested_configurations", "window_sections", "write_json", "write_manifest",
           "write_marker", "write_report", "write_tests_report"]
