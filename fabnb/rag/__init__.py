"""RAG runs: a reference RAG system, adapters for production frameworks, context sweeps, dual mode.

FAB-Bench §3.5, §4.1, §6 and Appendix F. Every system answers through one small
protocol, :class:`RAGSystem`: ``ask(question, config, gold_context=None) -> Answer``.

- :class:`ReferenceRAG`: a retriever over the chunked corpus (:class:`TfidfRetriever`,
  :class:`BM25Retriever`, :class:`DenseRetriever` with any embedding function, and
  :class:`HybridRetriever` by reciprocal-rank fusion) plus any OpenAI-compatible chat
  model from :mod:`fabnb.models.llm`. The knobs of the paper's experiments live in
  :class:`RAGConfig`: the context budget (4K-128K tokens), the number of snippets and
  the similarity threshold (AnythingLLM's defaults, 4 and 0.25, as
  :data:`ANYTHINGLLM_DEFAULTS`), and §4.1's output-token schedule.
- Adapters: :class:`AnythingLLM` (workspace chat API, sources with text),
  :class:`RAGFlow` (OpenAI-compatible chat endpoint; references when it returns them),
  :class:`MaxKB` (OpenAI-compatible; sources from the conversation record when the application shows them,
  else Appendix F's heuristic context detection),
  :class:`Metaso` (structured references), the framework servers :class:`Hayhooks` (a Haystack pipeline over
  REST), :class:`LightRAG` (its server's chunks) and :class:`OpenWebUI` (a knowledge collection's chunks), and
  :class:`HTTPAdapter` (any JSON API, by request template and response paths).
- Dual mode (Appendix F.3): mode ``"A"`` asks through the system's own retrieval, mode
  ``"B"`` injects the gold context. Results keep the mode, so B - A is per question.
- :func:`run_grid` runs systems x context configurations x modes x questions with
  bounded concurrency into a :class:`ResultsStore`, an append-only JSONL file written as
  each answer arrives; a killed run resumes without asking a finished cell again.

The package, by subject: :mod:`~fabnb.rag.config` (RAGConfig, the output schedule,
RAGError), :mod:`~fabnb.rag.retrievers`, :mod:`~fabnb.rag.system` (the protocol and
ReferenceRAG), :mod:`~fabnb.rag.adapters`, :mod:`~fabnb.rag.frameworks` (LlamaIndex, LangChain and Haystack
pipelines in process) and :mod:`~fabnb.rag.grid` (run_grid). The
results store is :class:`fabnb.core.records.ResultsStore`, re-exported here.
"""

# Compact re-exports: one statement per module, several names per line.
# isort: off
from __future__ import annotations
from ..core.records import ResultsStore
from ..core.schema import RESULT_COLUMNS, RESULT_KEYS
from .adapters import (AnythingLLM, Hayhooks, HTTPAdapter, LightRAG, MaxKB, Metaso, OpenWebUI, RAGFlow,
                       detect_context_use, get_path)
from .config import (ANYTHINGLLM_DEFAULTS, CONTEXT_INDICATORS, OUTPUT_SCHEDULE, PAPER_CONTEXTS, PROMPT_OVERHEAD,
                     SYSTEM_PROMPT, RAGConfig, RAGError, count_tokens, output_tokens, sweep, truncate_tokens)
from .frameworks import (FRAMEWORKS, QUESTION_TOKENS, SERVE_ENV, Framework, FrameworkRAG, FrameworkSetup,
                         ServedPipeline, load_factory)
from .kinds import SYSTEM_KINDS, Setting, SystemKind, add_kind, system_kind, system_kinds
from .grid import (GridRun, ask_cell, evidence_position, mode_pairs, position_depth, position_mode, questions_frame,
                   retrieval_table, run_grid)
from .retrievers import (HIT_COLUMNS, MINILM, RETRIEVERS, BM25Retriever, DenseRetriever, HybridRetriever,
                         Retriever, RetrieverKind, TfidfRetriever, make_retriever, minilm_embedder, minilm_path,
                         openai_embedder, pick_context, select_context)
from .system import (Answer, RAGSystem, ReferenceRAG, answer_from_context, check_answer, check_budget, context_prompt,
                     count_context, prepare_system)
# isort: on

__all__ = ['ANYTHINGLLM_DEFAULTS', 'Answer', 'AnythingLLM', 'BM25Retriever', 'CONTEXT_INDICATORS', 'DenseRetriever',
           'FRAMEWORKS', 'Framework', 'FrameworkRAG', 'FrameworkSetup', 'GridRun', 'HIT_COLUMNS', 'HTTPAdapter',
           'Hayhooks', 'HybridRetriever', 'LightRAG', 'MINILM', 'MaxKB', 'Metaso', 'OUTPUT_SCHEDULE', 'OpenWebUI',
           'PAPER_CONTEXTS', 'PROMPT_OVERHEAD', 'QUESTION_TOKENS', 'RAGConfig', 'RAGError', 'RAGFlow', 'RAGSystem',
           'RESULT_COLUMNS', 'RESULT_KEYS', 'RETRIEVERS', 'ReferenceRAG', 'ResultsStore', 'Retriever',
           'RetrieverKind', 'SERVE_ENV', 'SYSTEM_KINDS', 'SYSTEM_PROMPT', 'ServedPipeline', 'Setting', 'SystemKind',
           'TfidfRetriever', 'add_kind', 'answer_from_context', 'ask_cell', 'check_answer', 'check_budget',
           'context_prompt', 'count_context', 'count_tokens', 'detect_context_use', 'evidence_position', 'get_path',
           'load_factory', 'make_retriever', 'minilm_embedder', 'minilm_path', 'mode_pairs', 'openai_embedder',
           'output_tokens', 'pick_context', 'position_depth', 'position_mode', 'prepare_system', 'questions_frame',
           'retrieval_table', 'run_grid', 'select_context', 'sweep', 'system_kind', 'system_kinds', 'truncate_tokens']
