"""The experiment file: one small spec per TOML table, each reading and checking its own table.

The file reads top to bottom as the tables do: the top level (name, output, seed, concurrency, budget_usd),
``[questions]`` (:class:`QuestionsSpec`), ``[corpus]`` (:class:`CorpusSpec`), ``[[systems]]`` (:class:`SystemSpec`),
``[contexts]`` (:class:`ContextsSpec`), ``[judge]`` (:class:`JudgeSpec`), ``[tests]`` (:class:`TestsSpec`,
RAG-TESTER), ``[prices]`` and ``[report]`` (:class:`ReportSpec`). Each spec's ``from_table`` raises
:class:`ExperimentError` naming the file, line and key.

Examples
--------
>>> ContextsSpec.from_table({"windows": [1, 2], "modes": ["A", "B"]}, "<dict>").windows
(1.0, 2.0)
>>> JudgeSpec.from_table({"metrics": ["relevance"], "replicates": 2}, "<dict>").metrics
('relevance',)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core.schema import METRICS, TEST_TYPES
from ..core.values import line_of
from ..judge.rubrics import RUBRIC_VERSION
from .fields import (
    FIGURE_FORMATS,
    MAX_WINDOWS,
    RANGES,
    ExperimentError,
    check_range,
    check_table,
    no_duplicates,
    resolve_path,
)
from .prices import price_of
from .systems import Endpoint, SystemSpec, grid_tables, systems_from_tables

__all__ = ["MAX_WINDOWS", "RANGES", "ContextsSpec", "CorpusSpec", "Endpoint", "Experiment", "ExperimentError",
           "JudgeSpec", "QuestionsSpec", "ReportSpec", "SystemSpec", "TestsSpec", "prices_from_table",
           "systems_from_tables"]


@dataclass(frozen=True)
class QuestionsSpec:
    """``[questions]``: the QA pairs asked (the FAB-Bench release or a folder), a seeded stratified sample."""

    source: str = "fab-bench"
    sample: int | None = None
    stratify: tuple[str, ...] = ("test_type", "question_format")
    test_types: tuple[str, ...] = ()

    @classmethod
    def from_table(cls, q: dict, where: str, text: str | None = None, base: Path | None = None) -> "QuestionsSpec":
        check_table(q, "questions", where, text)
        sample = q.get("sample", "all")
        if isinstance(sample, str) and sample != "all" or isinstance(sample, int) and sample < 1:
            raise ExperimentError(f"{where}: [questions] sample = {sample!r} must be \"all\" or a positive integer.")
        stratify = tuple(q.get("stratify", ["test_type", "question_format"]))
        if set(stratify) - {"test_type", "question_format", "objective_subtype"}:
            raise ExperimentError(f"{where}: [questions] stratify = {list(stratify)} may hold test_type, "
                                  "question_format and objective_subtype.")
        test_types = q.get("test_types", [])
        unknown = [t for t in test_types if t not in TEST_TYPES]
        if unknown:
            raise ExperimentError(f"{where}: [questions] test_types = {test_types!r}{line_of(text, 'test_types')} "
                                  f"names {unknown[0]!r}, not a test type; allowed: {', '.join(TEST_TYPES)}.")
        source = q.get("source", "fab-bench")
        if source != "fab-bench":
            source = resolve_path(source, base or Path.cwd())
            _check_questions_source(source, where, text)
        return cls(source, None if sample == "all" else int(sample), stratify, tuple(test_types))


def _check_questions_source(source: str, where: str, text: str | None) -> None:
    """A questions source is a folder of QA JSON files, one such file, or a CSV or JSON Lines file of one's own
    questions (:mod:`fabnb.data.plain`); ``/dev/zero``, a pipe or a device is refused here, before anything reads
    it."""
    import stat

    path, line = Path(source), line_of(text, "source")
    try:
        mode = path.stat().st_mode
    except OSError:
        raise ExperimentError(f"{where}: [questions] source = {source!r}{line} does not exist; name a folder of "
                              "FAB-Bench-format QA JSON files, a CSV or JSONL file of questions (question,answer,...), "
                              "or \"fab-bench\" for the release.") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ExperimentError(f"{where}: [questions] source = {source!r}{line} is not a regular file or a folder; "
                              "name a folder of QA JSON files (or one such file).")


@dataclass(frozen=True)
class CorpusSpec:
    """``[corpus]``: the documents the reference systems retrieve from, and how they are chunked.

    ``distractors``: when set, only a part of the corpus is indexed: the sampled questions' gold documents and
    this many others, drawn with the experiment's seed (a quick look: retrieval over a part is easier than over
    the whole, and the report says so). None indexes every document.
    """

    source: str = "fab-bench-evidence"
    chunk_size: int = 512
    chunk_overlap: int = 128
    distractors: int | None = None

    @classmethod
    def from_table(cls, corpus: dict, where: str, text: str | None = None, base: Path | None = None) -> "CorpusSpec":
        check_table(corpus, "corpus", where, text)
        size, overlap = int(corpus.get("chunk_size", 512)), int(corpus.get("chunk_overlap", 128))
        if overlap >= size:
            raise ExperimentError(f"{where}: [corpus] chunk_overlap = {overlap}{line_of(text, 'chunk_overlap')} "
                                  f"must be smaller than chunk_size = {size}: each chunk must move the window on.")
        source = corpus.get("source", "fab-bench-evidence")
        if source != "fab-bench-evidence":
            source = resolve_path(source, base or Path.cwd())
            _check_corpus_folder(source, where, text)
        distractors = corpus.get("distractors")
        return cls(source, size, overlap, None if distractors is None else int(distractors))

    def signature(self) -> dict:
        sig = {"source": self.source, "size": self.chunk_size, "overlap": self.chunk_overlap}
        if self.distractors is not None:  # only then: the folders of whole-corpus runs keep their signature
            sig["distractors"] = self.distractors
        return sig


def _check_corpus_folder(source: str, where: str, text: str | None) -> None:
    """A corpus source must be a folder (or a file) holding at least one readable document."""
    from ..corpus.collection import FORMATS as DOCUMENT_SUFFIXES

    path = Path(source)
    line = line_of(text, "source")
    if not path.exists():
        raise ExperimentError(f"{where}: [corpus] source = {source!r}{line} does not exist; name a folder of "
                              f"documents ({', '.join(DOCUMENT_SUFFIXES)}).")
    files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    if not any(p.suffix.lower() in DOCUMENT_SUFFIXES and p.stat().st_size > 0 for p in files):  # stops at the first
        raise ExperimentError(f"{where}: [corpus] source = {source!r}{line} holds no readable document (files "
                              f"ending {', '.join(DOCUMENT_SUFFIXES)}, not empty).")


@dataclass(frozen=True)
class ContextsSpec:
    """``[contexts]``: the context windows (K tokens), the modes (A: own retrieval, B: gold context), the output
    budget and the retrieval knobs."""

    windows: tuple[float, ...] = (4.0,)
    modes: tuple[str, ...] = ("A",)
    output_k: float | str = "schedule"
    n_snippets: int | None = None
    threshold: float = 0.0
    temperature: float = 0.0
    positions: tuple[int, ...] = ()  # the position sweep: percent depths of the gold passage (modes P0 ... P100)
    position_sample: int | None = None  # questions the sweep asks (a seeded sample; None: every one)

    @classmethod
    def from_table(cls, ctx: dict, where: str, text: str | None = None) -> "ContextsSpec":
        check_table(ctx, "contexts", where, text)
        windows = ctx.get("windows", [4])
        if windows == "paper":
            from ..rag import PAPER_CONTEXTS

            windows = list(PAPER_CONTEXTS)
        if isinstance(windows, str) or not windows or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in windows):
            raise ExperimentError(f"{where}: [contexts] windows = {windows!r}{line_of(text, 'windows')} must be "
                                  "\"paper\" or a list of positive window sizes in K tokens, e.g. [4, 8, 16].")
        if len(windows) > MAX_WINDOWS:
            raise ExperimentError(f"{where}: [contexts] windows{line_of(text, 'windows')} lists {len(windows)} "
                                  f"windows, over the {MAX_WINDOWS} one file may run (the paper runs 11); list "
                                  "fewer, or split the study into several files.")
        no_duplicates([float(w) for w in windows], "windows", "[contexts]", where, text)
        modes = tuple(ctx.get("modes", ["A"]))
        if not modes or set(modes) - {"A", "B"}:
            raise ExperimentError(f"{where}: [contexts] modes = {list(modes)!r} must be a non-empty list of \"A\" "
                                  "(the system's own retrieval) and \"B\" (gold context).")
        no_duplicates(list(modes), "modes", "[contexts]", where, text)
        output_k = ctx.get("output_k", "schedule")
        if isinstance(output_k, str) and output_k != "schedule":
            raise ExperimentError(f"{where}: [contexts] output_k = {output_k!r} must be \"schedule\" (the paper's "
                                  "1K/2K/4K) or a number of K tokens.")
        positions = ctx.get("positions", [])
        if not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 100 for p in positions):
            raise ExperimentError(f"{where}: [contexts] positions = {positions!r}{line_of(text, 'positions')} must "
                                  "list depths of the gold passage in percent of the window, whole numbers from 0 "
                                  "(first) to 100 (last), e.g. [0, 25, 50, 75, 100].")
        no_duplicates(list(positions), "positions", "[contexts]", where, text)
        sample = ctx.get("position_sample")
        if sample is not None and (not positions or sample < 1):
            raise ExperimentError(f"{where}: [contexts] position_sample = {sample!r}{line_of(text, 'position_sample')}"
                                  " is the number of questions the position sweep asks: a whole number from 1, "
                                  "with positions set.")
        return cls(tuple(float(w) for w in windows), modes,
                   output_k if isinstance(output_k, str) else float(output_k), ctx.get("n_snippets"),
                   float(ctx.get("threshold", 0.0)), float(ctx.get("temperature", 0.0)), tuple(positions), sample)

    @property
    def position_modes(self) -> tuple[str, ...]:
        """The position sweep's modes, ``P<percent>`` (:func:`fabnb.rag.grid.position_mode`); empty without one."""
        return tuple(f"P{p}" for p in self.positions)

    def configs(self) -> list:
        """One :class:`fabnb.rag.RAGConfig` per window."""
        from ..rag import RAGConfig

        out_k = None if self.output_k == "schedule" else float(self.output_k)
        return [RAGConfig(w, n_snippets=self.n_snippets, threshold=self.threshold, output_k=out_k,
                          temperature=self.temperature) for w in self.windows]


@dataclass(frozen=True)
class JudgeSpec:
    """``[judge]``: the judge's endpoint, the G-Eval metrics, replicates, logprob weighting and limits."""

    endpoint: Endpoint = Endpoint("embedded")
    metrics: tuple[str, ...] = METRICS
    replicates: int = 1
    logprobs: bool = True
    reference_check: bool = True
    reason_chars: int = 400
    max_answer_tokens: int = 3000
    concurrency: int = 8
    temperature: float = 0.0
    n_ctx: int = 8192
    workers: int = 1  # processes the judge's calls are spread over (fabnb.judge.workers)
    mode: str = "online"  # "batch": the scores through the endpoint's batch routes (fabnb.experiment.batching)
    batch_retry: str = "batch"  # what a batch left: into the next batch, or "online"
    batch_poll: float = 30.0  # seconds between a batch's state checks

    @classmethod
    def from_table(cls, j: dict, where: str, text: str | None = None) -> "JudgeSpec":
        check_table(j, "judge", where, text)
        endpoint = Endpoint.from_table({"model": "embedded", **j} if "model" not in j else j, where, "[judge]")
        metrics = j.get("metrics", "all")
        metrics = METRICS if metrics == "all" else tuple(metrics)
        if isinstance(metrics, str) or not metrics or set(metrics) - set(METRICS):
            raise ExperimentError(f"{where}: [judge] metrics = {j.get('metrics')!r} must be \"all\" or a list of "
                                  f"{', '.join(METRICS)}.")
        no_duplicates(list(metrics), "metrics", "[judge]", where, text)
        if int(j.get("workers", 1)) > 1 and endpoint.embedded:  # one slot: more processes only queue at it
            raise ExperimentError(f"{where}: [judge] workers{line_of(text, 'workers')}: the embedded model answers "
                                  "one call at a time. Remove workers, or judge with a server (model, base_url_env).")
        g = j.get
        for key, allowed in (("mode", ("online", "batch")), ("batch_retry", ("batch", "online"))):
            if g(key, allowed[0]) not in allowed:
                raise ExperimentError(f"{where}: [judge] {key} = {g(key)!r}{line_of(text, key)} must be "
                                      + " or ".join(f'"{a}"' for a in allowed) + ".")
        return cls(endpoint, metrics, int(g("replicates", 1)), bool(g("logprobs", True)),
                   bool(g("reference_check", True)), int(g("reason_chars", 400)), int(g("max_answer_tokens", 3000)),
                   int(g("concurrency", 8)), float(g("temperature", 0.0)), int(g("n_ctx", 8192)), int(g("workers", 1)),
                   g("mode", "online"), g("batch_retry", "batch"), float(g("batch_poll", 30.0)))

    def signature(self) -> dict:
        """What makes a score what it is: a change here is refused on resume."""
        return {"endpoint": self.endpoint.identity(), "rubric_version": RUBRIC_VERSION, "logprobs": self.logprobs,
                "reason_chars": self.reason_chars, "max_answer_tokens": self.max_answer_tokens,
                "temperature": self.temperature}


@dataclass(frozen=True)
class TestsSpec:
    """``[tests]``: RAG-TESTER on the file's systems. Tests are written from the corpus by the tester model (its
    own endpoint keys; the embedded model by default), asked of every ``[[systems]]`` entry at every window and
    mode, and judged by the oracle on the ``[judge]`` endpoint.

    Per document: ``n_complex`` complex-passage tests (RAG-TESTER's N_complex), ``n_negative`` negative-rejection
    and ``n_coverage`` coverage tests (with N_complex, N_test), and ``n_baseline`` tests of each baseline (random,
    fair). ``documents`` draws that many documents of the corpus (seeded); ``rounds`` adds coverage rounds fed by
    the chunks the systems' retrieval returned; ``threshold`` is the oracle's pass mark; ``ask_location`` adds
    Appendix E's request for the source location and span to every question; ``evidence`` is what the oracle
    judges faithfulness against (``expected`` or ``retrieved``).
    """

    __test__ = False  # not a pytest test class, despite the name

    endpoint: Endpoint = Endpoint("embedded")
    n_complex: int = 1
    n_negative: int = 1
    n_coverage: int = 1
    n_baseline: int = 1
    documents: int | None = None
    rounds: int = 0
    threshold: float = 0.5
    ask_location: bool = True
    evidence: str = "expected"

    @classmethod
    def from_table(cls, t: dict, where: str, text: str | None = None) -> "TestsSpec":
        check_table(t, "tests", where, text)
        endpoint = Endpoint.from_table({"model": "embedded", **t} if "model" not in t else t, where, "[tests]")
        documents = t.get("documents", "all")
        if isinstance(documents, str) and documents != "all":
            raise ExperimentError(f"{where}: [tests] documents = {documents!r}{line_of(text, 'documents')} must be "
                                  "\"all\" or a number of documents to draw.")
        evidence = t.get("evidence", "expected")
        if evidence not in ("expected", "retrieved"):
            raise ExperimentError(f"{where}: [tests] evidence = {evidence!r}{line_of(text, 'evidence')} must be "
                                  "\"expected\" (the test's own passage) or \"retrieved\" (what the system read).")
        counts = [int(t.get(k, 1)) for k in ("n_complex", "n_negative", "n_coverage")]
        if not sum(counts):
            raise ExperimentError(f"{where}: [tests] n_complex, n_negative and n_coverage are all 0: no strategy "
                                  "would write a test. Set at least one of them above 0.")
        return cls(endpoint, *counts, int(t.get("n_baseline", 1)), None if documents == "all" else int(documents),
                   int(t.get("rounds", 0)), float(t.get("threshold", 0.5)), bool(t.get("ask_location", True)),
                   evidence)

    def signature(self) -> dict:
        """What makes a test and a verdict what they are: a change here is refused on resume."""
        return {"tester": self.endpoint.identity(), "n_complex": self.n_complex, "n_negative": self.n_negative,
                "n_coverage": self.n_coverage, "n_baseline": self.n_baseline, "documents": self.documents,
                "rounds": self.rounds, "threshold": self.threshold, "ask_location": self.ask_location,
                "evidence": self.evidence}


@dataclass(frozen=True)
class ReportSpec:
    """``[report]``: what the report adds to the run's own scores."""

    compare_published: bool = False
    figures: tuple = ("png", "svg")  # the formats of report/figures/; () draws none
    bootstrap: int = 2000  # draws of every interval (fabnb.core.stats.N_BOOT)
    seed: int = 0  # their seed (fabnb.core.stats.SEED)

    @classmethod
    def from_table(cls, r: dict, where: str, text: str | None = None) -> "ReportSpec":
        check_table(r, "report", where, text)
        figures = r.get("figures", ["png", "svg"])
        if not isinstance(figures, list) or not all(f in FIGURE_FORMATS for f in figures):
            raise ExperimentError(f"{where}: [report] figures{line_of(text, 'figures')} must be a list of "
                                  f"{', '.join(map(repr, FIGURE_FORMATS))} (or [] for no figures), not {figures!r}.")
        return cls(bool(r.get("compare_published", False)), tuple(dict.fromkeys(figures)),
                   int(r.get("bootstrap", 2000)), int(r.get("seed", 0)))


def prices_from_table(table: dict, where: str, text: str | None = None) -> dict:
    """``[prices]``: ``{model: {input, output, date, source}}`` in dollars per million tokens."""
    prices = {}
    for model, p in table.items():
        if not isinstance(p, dict) or "input" not in p or "output" not in p:
            raise ExperimentError(f"{where}: [prices] {model!r}{line_of(text, model)} must be a table with input "
                                  "and output (dollars per million tokens), and date and source.")
        check_table(p, "prices", where, text, f"[prices.{model}]")
        if ("batch_input" in p) != ("batch_output" in p):
            raise ExperimentError(f"{where}: [prices.{model}]{line_of(text, model)} gives one of batch_input and "
                                  "batch_output: give both (the batch price, dollars per million tokens) or neither.")
        for key in ("input", "output", "batch_input", "batch_output"):
            if key in p:
                check_range("prices", key, p[key], where, text, f"[prices.{model}]")
        prices[model] = {"input": float(p["input"]), "output": float(p["output"]),
                         **{k: float(p[k]) for k in ("batch_input", "batch_output") if k in p},
                         "date": p.get("date", ""), "source": p.get("source", where)}
    return prices


def _alias(table: str, key: str) -> property:
    """A read-only attribute of the experiment that reads one key of one of its table specs."""
    return property(lambda self: getattr(getattr(self, table), key), doc=f"``{table}.{key}`` (kept for existing code).")


def _check_framework_budgets(exp, where: str, text: str | None) -> None:
    """A default framework pipeline chunks the corpus at ``[corpus] chunk_size``; a window whose context budget
    (:attr:`fabnb.rag.RAGConfig.context_tokens`) is smaller than one chunk sends next to no context (seen: 0.5K
    with 128-token chunks left a 64-token budget, and Haystack sent none), so the comparison with the reference
    system would not be fair. A user's own ``factory`` chunks as it likes and is not checked."""
    defaults = [s.name for s in exp.systems if s.framework and not s.settings.get("factory")]
    if not defaults:
        return
    from ..rag.config import PROMPT_OVERHEAD, QUESTION_TOKENS
    small = [(c.context_k, c.context_tokens) for c in exp.configs() if c.context_tokens < exp.chunk_size]
    if small:
        said = ", ".join(f"{k}K gives {n}" for k, n in small)
        raise ExperimentError(
            f"{where}: [contexts] windows{line_of(text, 'windows')}: the default framework pipelines {defaults} "
            f"would get fewer context tokens than one of their chunks ([corpus] chunk_size = {exp.chunk_size}): "
            f"{said} (the window less the output budget, the prompt's {PROMPT_OVERHEAD} and the question's "
            f"{QUESTION_TOKENS} tokens). Use a wider window or a smaller chunk_size.")


@dataclass(frozen=True)
class Experiment:
    """An experiment: what to ask, whom, at which windows and modes, how to judge, where to write.

    Build it with :meth:`from_file` (TOML) or :meth:`from_dict` (the same keys); ``examples/offline.toml`` has every
    key with its meaning. Each TOML table is a spec of its own (``exp.contexts``, ``exp.question_set``, ``exp.corpus``,
    ``exp.judging``, ``exp.report``); the flat names of earlier releases (``exp.windows``, ...) read them.

    Examples
    --------
    >>> exp = Experiment.from_dict({"name": "demo", "output": "out", "contexts": {"windows": [2, 4]},
    ...                             "systems": [{"name": "local", "model": "embedded"}]})
    >>> exp.contexts.windows == exp.windows == (2.0, 4.0), exp.judge.model
    (True, 'embedded')
    """

    name: str
    output: Path
    systems: tuple[SystemSpec, ...]
    contexts: ContextsSpec = ContextsSpec()
    question_set: QuestionsSpec = QuestionsSpec()
    corpus: CorpusSpec = CorpusSpec()
    judging: JudgeSpec = JudgeSpec()
    report: ReportSpec = ReportSpec()
    tests: TestsSpec | None = None  # RAG-TESTER's run instead of the FAB-Bench questions
    prices: dict = field(default_factory=dict)
    budget_usd: float | None = None
    confirm_usd: float | None = None  # None: fabnb.experiment.planning.CONFIRM_USD
    confirm_hours: float | None = None  # None: fabnb.experiment.planning.CONFIRM_HOURS
    concurrency: int = 4
    seed: int = 0
    source_text: str = field(default="", repr=False, compare=False)
    source: str = "<dict>"

    windows = _alias("contexts", "windows")
    output_k = _alias("contexts", "output_k")
    n_snippets = _alias("contexts", "n_snippets")
    threshold = _alias("contexts", "threshold")
    temperature = _alias("contexts", "temperature")
    questions_source = _alias("question_set", "source")
    sample = _alias("question_set", "sample")
    stratify = _alias("question_set", "stratify")
    test_types = _alias("question_set", "test_types")
    corpus_source = _alias("corpus", "source")
    chunk_size = _alias("corpus", "chunk_size")
    chunk_overlap = _alias("corpus", "chunk_overlap")
    judge = _alias("judging", "endpoint")
    metrics = _alias("judging", "metrics")
    replicates = _alias("judging", "replicates")
    logprobs = _alias("judging", "logprobs")
    reference_check = _alias("judging", "reference_check")
    reason_chars = _alias("judging", "reason_chars")
    max_answer_tokens = _alias("judging", "max_answer_tokens")
    judge_concurrency = _alias("judging", "concurrency")
    judge_temperature = _alias("judging", "temperature")
    judge_n_ctx = _alias("judging", "n_ctx")
    compare_published = _alias("report", "compare_published")

    @property
    def modes(self) -> tuple[str, ...]:
        """Every mode a cell is asked in: ``[contexts] modes``, then the position sweep's (``P<percent>``)."""
        return self.contexts.modes + self.contexts.position_modes

    def asked_in(self, mode: str, questions: pd.DataFrame) -> pd.DataFrame:
        """The questions asked in ``mode``: all of them, except for a position sweep's modes with
        ``position_sample``, which ask a sample of the questions that have gold context, seeded by ``seed`` (the
        same sample in every window, position and rerun).

        >>> exp = Experiment.from_dict({"name": "d", "output": "o", "contexts": {"positions": [0, 100],
        ...                             "position_sample": 1}, "systems": [{"name": "r", "model": "embedded"}]})
        >>> q = pd.DataFrame({"test_id": ["q1", "q2"], "gold_context": ["x", ""]})
        >>> exp.modes, len(exp.asked_in("A", q)), exp.asked_in("P100", q)["test_id"].tolist()
        (('A', 'P0', 'P100'), 2, ['q1'])
        """
        if mode not in self.contexts.position_modes or self.contexts.position_sample is None:
            return questions
        golden = questions[questions["gold_context"].fillna("").astype(str).str.len() > 0]
        if len(golden) <= self.contexts.position_sample:
            return golden
        return golden.sample(self.contexts.position_sample, random_state=self.seed).sort_index()

    def mode_groups(self, questions: pd.DataFrame) -> list[tuple[tuple[str, ...], pd.DataFrame]]:
        """The modes asked of the same questions, with those questions: ``[contexts] modes`` with all of them, then
        the position sweep's modes with its sample (none without a sweep). One grid runs per group.

        >>> exp = Experiment.from_dict({"name": "d", "output": "o", "contexts": {"positions": [0, 100],
        ...                             "position_sample": 1}, "systems": [{"name": "r", "model": "embedded"}]})
        >>> q = pd.DataFrame({"test_id": ["q1", "q2"], "gold_context": ["x", "y"]})
        >>> {modes: len(asked) for modes, asked in exp.mode_groups(q)}
        {('A',): 2, ('P0', 'P100'): 1}
        """
        return [(modes, self.asked_in(modes[0], questions))
                for modes in (self.contexts.modes, self.contexts.position_modes) if modes]

    # ------------------------------------------------------------ reading
    @classmethod
    def from_file(cls, path: str | Path, output: str | Path | None = None) -> "Experiment":
        """Read a TOML experiment file; relative paths in it are relative to the file.

        Raises :class:`ExperimentError` naming the file, the line and the key.
        """
        import tomllib

        from ..core.files import MAX_FILE_BYTES, FileRefused, read_text

        path = Path(path)
        try:  # a regular file of at most 1 MB, UTF-8 (a byte-order mark is dropped: TOML does not allow one)
            text = read_text(path, setting="the experiment file", max_bytes=MAX_FILE_BYTES["experiment"])
        except FileRefused as exc:
            raise ExperimentError(f"cannot read the experiment file {path}: it {exc.reason}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExperimentError(f"{path}: not valid TOML: {exc}. Fix the line it names.") from None
        return cls.from_dict(data, source=str(path), text=text, base=path.parent, output=output)

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>", text: str | None = None, base: Path | None = None,
                  output: str | Path | None = None) -> "Experiment":
        """The same keys as the TOML file, as a dict (``base``: the folder relative paths start from)."""
        where = source
        check_table(data, "", where, text)
        for section in ("questions", "corpus", "contexts", "judge", "tests", "report"):  # key errors first
            check_table(data.get(section, {}), section, where, text)
        if "tests" in data and "questions" in data:
            raise ExperimentError(f"{where}: [tests]{line_of(text, '[tests]')} and [questions] in one file: a [tests] "
                                  "run asks the tests it writes from [corpus], not questions. Remove [questions], "
                                  "or run the tests from a file of their own.")
        base = Path(base) if base is not None else Path.cwd()
        grid = grid_tables(data.get("tests") or {}, where, text)  # a [tests] grid: LLM x retriever systems
        exp = cls(name=_name(data, where), output=_output(data, where, base, output, text),
                  systems=systems_from_tables(data.get("systems", []) + grid, where, text),
                  contexts=ContextsSpec.from_table(data.get("contexts", {}), where, text),
                  question_set=QuestionsSpec.from_table(data.get("questions", {}), where, text, base),
                  corpus=CorpusSpec.from_table(data.get("corpus", {}), where, text, base),
                  judging=JudgeSpec.from_table(data.get("judge", {"model": "embedded"}), where, text),
                  report=ReportSpec.from_table(data.get("report", {}), where, text),
                  tests=TestsSpec.from_table(data["tests"], where, text) if "tests" in data else None,
                  prices=prices_from_table(data.get("prices", {}), where, text),
                  budget_usd=None if data.get("budget_usd") is None else float(data["budget_usd"]),
                  confirm_usd=None if data.get("confirm_usd") is None else float(data["confirm_usd"]),
                  confirm_hours=None if data.get("confirm_hours") is None else float(data["confirm_hours"]),
                  concurrency=int(data.get("concurrency", 4)), seed=int(data.get("seed", 0)),
                  source_text=text or "", source=source)
        _check_framework_budgets(exp, where, text)
        if exp.contexts.positions and exp.tests is not None:
            raise ExperimentError(f"{where}: [contexts] positions{line_of(text, 'positions')} with [tests]: the "
                                  "position sweep asks questions with gold context, not RAG-TESTER's tests. Run the "
                                  "sweep from a file of its own.")
        if exp.contexts.positions:
            builds_own = [s.name for s in exp.systems if s.kind != "reference"]
            if builds_own:
                raise ExperimentError(f"{where}: [contexts] positions{line_of(text, 'positions')}: the position sweep "
                                      f"places the gold passage in a context fabnb builds, and {builds_own} build "
                                      "their own; run the sweep in a file whose systems are of the reference kind.")
        if exp.budget_usd is not None:
            unknown = [m for m in exp.models() if price_of(m, exp.prices) is None]
            if unknown:
                raise ExperimentError(f"{where}: budget_usd is set but no price is known for {unknown}; add them under "
                                      "[prices] as {input = ..., output = ..., date = ..., source = ...}.")
        return exp

    def __repr__(self) -> str:
        return (f"Experiment(name={self.name!r}, systems={[s.name for s in self.systems]}, "
                f"windows={list(self.windows)}, "
                f"modes={list(self.modes)}, metrics={len(self.metrics)}, output={str(self.output)!r})")

    # ------------------------------------------------------------ what it needs
    def models(self) -> list[str]:
        """The priced models: each reference or framework system's and the judge's."""
        ms = [s.endpoint.model for s in self.systems if s.uses_endpoint] + [self.judge.model]
        if self.tests is not None:
            ms.append(self.tests.endpoint.model)
        return list(dict.fromkeys(ms))

    def missing_env(self) -> list[tuple[str, str]]:
        """(who, variable) for every environment variable the file names that is not set here."""
        return [(s.name, v) for s in self.systems for v in s.endpoint.missing_env()] + \
            [("judge", v) for v in self.judge.missing_env()] + \
            [("tester", v) for v in (self.tests.endpoint.missing_env() if self.tests is not None else [])]

    def check_environment(self) -> None:
        """Raise :class:`ExperimentError` naming every environment variable the file names that is not set."""
        missing = self.missing_env()
        if missing:
            said = "; ".join(f"{v} (for {who}) is {'empty' if v in os.environ else 'not set'}" for who, v in missing)
            raise ExperimentError(f"{self.source}: environment variable(s) not usable: {said}. Export them before "
                                  "the run (keys never go in the file); a server that needs no key needs no "
                                  "api_key_env: leave the key out.")

    def configs(self) -> list:
        """One :class:`fabnb.rag.RAGConfig` per window."""
        return self.contexts.configs()

    def pairs(self):
        from ..data.datasets import load_fab_bench, read_qa_files

        if self.questions_source == "fab-bench":
            return list(load_fab_bench())
        qa = read_qa_files(self.questions_source, on_error="raise")
        if not len(qa):
            raise ExperimentError(f"{self.source}: [questions] source {self.questions_source} holds no QA files.")
        return list(qa)

    def questions(self) -> pd.DataFrame:
        """The questions of the run: test_id, test_type, question_format, objective_subtype, question,
        ground_truth_answer, gold_context, gold_doc_ids (a seeded stratified sample when ``sample`` is set)."""
        from ..rag import questions_frame

        pairs = self.pairs()
        frame = questions_frame(pairs)
        frame.insert(3, "objective_subtype", [p.objective_subtype for p in pairs])
        if self.test_types:
            frame = frame[frame["test_type"].isin(self.test_types)]
        if self.sample is not None and self.sample < len(frame):
            # Shuffle with the seed, then deal one question per stratum in turn: every stratum is represented
            # before any gets a second question.
            shuffled = frame.sample(frac=1.0, random_state=self.seed)
            rank = shuffled.groupby(list(self.stratify), sort=False).cumcount()
            frame = shuffled.assign(_rank=rank).sort_values("_rank", kind="stable").head(self.sample)
            frame = frame.drop(columns="_rank").sort_values("test_id")
        return frame.reset_index(drop=True)

    def documents(self, questions: pd.DataFrame | None = None):
        """The corpus (a :class:`fabnb.corpus.collection.Corpus`) when a system retrieves from it (a reference system
        or a framework); else None. ``questions``: :meth:`questions`, when the caller has them (``distractors``
        keeps their gold documents)."""
        if not any(s.uses_endpoint for s in self.systems):
            return None
        corpus = self.whole_corpus()
        if self.corpus.distractors is None:
            return corpus
        gold = gold_documents(self.questions() if questions is None else questions)
        others = corpus.documents[~corpus.documents["doc_id"].isin(gold)]
        drawn = others.sample(n=min(self.corpus.distractors, len(others)), random_state=self.seed)
        return corpus.select(gold | set(drawn["doc_id"]))

    def whole_corpus(self):
        """Every document of ``[corpus] source``: the FAB-Bench evidence corpus or a folder's documents."""
        from ..corpus.collection import load_corpus
        from ..data.datasets import evidence_corpus, load_fab_bench

        return (evidence_corpus(list(load_fab_bench())) if self.corpus_source == "fab-bench-evidence"
                else load_corpus(self.corpus_source))

    def chunk(self, corpus) -> pd.DataFrame:
        """``corpus`` cut at ``[corpus] chunk_size`` and ``chunk_overlap`` (a short document's warning is not shown:
        the chunks' ``whole_document`` column says it)."""
        import warnings

        from ..corpus.collection import chunk_corpus

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return chunk_corpus(corpus, size=self.chunk_size, overlap=self.chunk_overlap)

    def chunks(self, documents=None, questions: pd.DataFrame | None = None) -> pd.DataFrame | None:
        """The chunked corpus for reference systems (None when no system is one)."""
        if all(s.kind != "reference" for s in self.systems):
            return None
        return self.chunk(self.documents(questions) if documents is None else documents)

    def signatures(self) -> dict:
        systems = {s.name: s.signature(self.corpus.signature(), self.output_k) for s in self.systems}
        knobs = {"n_snippets": self.n_snippets, "threshold": self.threshold, "temperature": self.temperature}
        sig = {"systems": systems, "retrieval": knobs, "judge": self.judging.signature()}
        if self.tests is not None:  # only then: FAB-Bench runs' folders keep their signature
            sig["tests"] = {**self.tests.signature(), "corpus": self.corpus.signature(), "seed": self.seed}
        return sig


def gold_documents(questions: pd.DataFrame) -> set:
    """The doc_ids of the questions' gold documents (``gold_doc_ids``, a list per question)."""
    return {d for ids in questions["gold_doc_ids"] for d in ids}


def _name(data: dict, where: str) -> str:
    if not data.get("name"):
        raise ExperimentError(f"{where}: name = \"...\" is required (it marks the output folder as this "
                              "experiment's).")
    return str(data["name"])


def _output(data: dict, where: str, base: Path, output, text: str | None = None) -> Path:
    # An output given here (``fabnb run --out``) is relative to where the command runs; the file's own
    # ``output`` is relative to the file.
    out = Path(output).absolute() if output is not None else data.get("output")
    if out is None or not str(out).strip():
        raise ExperimentError(f"{where}: output = \"folder\"{line_of(text, 'output')} is required and may not be "
                              "empty (answers, scores and the report go there); name a new folder.")
    given = str(out)
    out = Path(out) if Path(out).is_absolute() else Path(os.path.normpath(base / out))
    said = f"output = {given!r}{line_of(text, 'output') if output is None else ' (--out)'}"
    if out.exists() and not out.is_dir():
        raise ExperimentError(f"{where}: {said} is a file, not a folder; name a new or empty folder (the file is "
                              "not touched).")
    if holds_other_files(out):
        raise ExperimentError(f"{where}: {said} is {out}, a folder that holds other files and no fabnb "
                              "manifest.json; name a new or empty folder (nothing there is touched).")
    return out


def holds_other_files(folder: Path) -> bool:
    """Whether ``folder`` exists and holds files that are not a fabnb run's: no ``manifest.json``, and more than
    the lock, marker and log that a run started from JupyterLab writes before its manifest."""
    if not folder.is_dir() or (folder / "manifest.json").exists():
        return False
    try:
        return any(p.name not in (".fabnb.lock", "run.fabnb", "run.log") for p in folder.iterdir())
    except OSError:
        return True
