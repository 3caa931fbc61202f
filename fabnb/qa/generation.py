"""Adaptive QA generation: FAB-Bench Section 3.3, Algorithm 1, Appendices B.2-B.3 and C.

The generator turns synthesized contexts (:mod:`fabnb.corpus.synthesis`) into QA pairs in
the FAB-Bench JSON schema. Per context it classifies precision (Eq. 1), sets the
temperature (Eqs. 4-9), top-p (Eq. 10) and similarity threshold (Eqs. 11-12),
builds the modular prompt of Appendix C, and tries up to ``R_max`` times to get an
answer that is valid and unique (Eqs. 13-14). Every attempt is logged; invalid
output is a counted failure that raises the temperature, never a crash.

All LLM calls go through :class:`fabnb.models.llm.LLM`, so a rerun of the same run is
answered from the cache: a killed run resumes where it stopped.

Readings of the paper chosen here:

- ``a`` (Eq. 7) counts the failed attempts on the current context and ``s`` (Eq. 8)
  its consecutive similarity failures; ``k`` (Eq. 5) counts accepted pairs so far.
- ``r`` (Eq. 12) is the retry index: 0 on a context's first attempt.
- Uniqueness (Eq. 13-14): rejected if the weighted similarity to any accepted
  question exceeds theta, or, with 5 or more accepted questions, if TF-IDF cosine
  exceeds theta + 0.05.
- Objective share: Appendix C.3 states a 40% target, yet its own rule forces
  objective questions while r_obj < 0.5, and Section 3.1 says 50%; the released
  benchmark is 59% objective. ``objective_target`` is a parameter, default 0.5.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.bars import stage_bar
from ..core.files import write_whole
from ..core.schema import TEST_TYPES
from ..core.text import QUOTE_SHARE, quoted_share, word_tokens
from ..corpus.terms import KnowledgeBase
from ..data.datasets import parse_qa, qa_frame
from ..models.llm import LLM, LLMError, parse_json

__all__ = ['ABLATION_GROUPS', 'ALPHA', 'ARCHETYPES', 'ATTEMPT_COLUMNS', 'BASE_THRESHOLD', 'CATEGORY_ADJUSTMENT',
           'FOLDERS', 'FormatPlan', 'GenerationConfig', 'GenerationRun', 'OBJECTIVE_SUBTYPES', 'QA_SCHEMA',
           'TEMPERATURE_RANGES', 'TEST_TYPE_MODULES', 'adaptive_temperature', 'attempt_boost', 'build_prompt',
           'generate_qa', 'jaccard', 'nucleus_top_p', 'plan_format', 'progressive_temperature', 'qa_schema',
           'run_ablation', 'similarity_boost', 'similarity_threshold', 'uniqueness', 'validate', 'weighted_similarity',
           'write_pairs']

# ----------------------------------------------------------------- equations

#: Eq. 4: [tau_min, tau_max] by precision level.
TEMPERATURE_RANGES = {"high": (0.4, 0.8), "medium": (0.5, 0.9), "low": (0.6, 1.0)}
#: Eq. 6: temperature adjustment by dominant category.
CATEGORY_ADJUSTMENT = {"parameters": -0.10, "processes": -0.08, "devices": -0.05, "testing": -0.03,
                       "materials": 0.00, "manufacturing": 0.02, "applications": 0.05}
#: Eq. 11: base similarity threshold by precision level.
BASE_THRESHOLD = {"high": 0.70, "medium": 0.75, "low": 0.80}
#: Eq. 13: weight of technical-term overlap.
ALPHA = 0.05


def progressive_temperature(precision: str, k: int) -> float:
    """Eq. 5: ``(tau_max - tau_min) * min(k / 20, 0.8)``.

    >>> round(progressive_temperature("high", 10), 3)
    0.2
    """
    lo, hi = TEMPERATURE_RANGES[precision]
    return (hi - lo) * min(k / 20, 0.8)


def attempt_boost(a: int) -> float:
    """Eq. 7: ``min(0.25, 0.08 a)``."""
    return min(0.25, 0.08 * a)


def similarity_boost(s: int) -> float:
    """Eq. 8: ``min(0.15, 0.05 s)``."""
    return min(0.15, 0.05 * s)


def adaptive_temperature(precision: str, k: int, category: str | None = None, a: int = 0, s: int = 0) -> float:
    """Eq. 9: ``clip(tau_min + tau_progress + dtau_c + dtau_attempt + dtau_similarity, 0.1, 1.0)``.

    Examples
    --------
    >>> adaptive_temperature("high", 0, "parameters")        # 0.4 - 0.10
    0.3
    >>> adaptive_temperature("low", 20, "applications", a=5, s=5)   # clipped
    1.0
    """
    lo, _ = TEMPERATURE_RANGES[precision]
    tau = lo + progressive_temperature(precision, k) + CATEGORY_ADJUSTMENT.get(category, 0.0) \
        + attempt_boost(a) + similarity_boost(s)
    return round(float(np.clip(tau, 0.1, 1.0)), 6)


def nucleus_top_p(tau: float) -> float:
    """Eq. 10: 0.95 if tau <= 0.4, 0.90 if tau <= 0.7, else 0.85."""
    return 0.95 if tau <= 0.4 else 0.90 if tau <= 0.7 else 0.85


def similarity_threshold(precision: str, r: int) -> float:
    """Eq. 12: ``max(0.50, theta_base(p) - 0.05 r)``.

    >>> similarity_threshold("medium", 2), similarity_threshold("high", 9)
    (0.65, 0.5)
    """
    return round(max(0.50, BASE_THRESHOLD[precision] - 0.05 * r), 6)


def jaccard(a: set, b: set) -> float:
    """``|a & b| / |a | b|`` (0 for two empty sets)."""
    return len(a & b) / len(a | b) if a | b else 0.0


def weighted_similarity(q1: str, q2: str, kb=None, alpha: float = ALPHA) -> float:
    """Eq. 13: ``Jaccard(W_q, W_q') + alpha * Jaccard(T_q, T_q')``.

    W are the lower-cased word tokens, T the knowledge-base terms found in each.

    Examples
    --------
    >>> round(weighted_similarity("etch rate of ALD", "etch rate of CVD"), 4)
    0.6
    """
    w = jaccard(set(word_tokens(q1)), set(word_tokens(q2)))
    if kb is None or alpha == 0:
        return w
    t = jaccard(set(kb.find(q1)["term"]), set(kb.find(q2)["term"]))
    return w + alpha * t


def uniqueness(question: str, accepted: list[str], theta: float, kb=None, alpha: float = ALPHA) -> dict:
    """UNIQUE(q, Q, theta) of Algorithm 1 with Eqs. 13-14.

    Returns
    -------
    dict
        unique (bool), max_weighted, max_semantic (NaN with fewer than 5
        accepted questions), reason (``""``, ``"too-similar"`` or ``"semantic-duplicate"``).
    """
    weighted = max((weighted_similarity(question, q, kb, alpha) for q in accepted), default=0.0)
    semantic = float("nan")
    if len(accepted) >= 5:
        from sklearn.feature_extraction.text import TfidfVectorizer

        matrix = TfidfVectorizer().fit_transform(accepted + [question])
        semantic = float((matrix[-1] @ matrix[:-1].T).toarray().max())
    reason = "too-similar" if weighted > theta else "semantic-duplicate" if semantic > theta + 0.05 else ""
    return {"unique": not reason, "max_weighted": weighted, "max_semantic": semantic, "reason": reason}


# ------------------------------------------------------------------- prompts

#: Table 7: instruction focus and metrics per test type.
TEST_TYPE_MODULES = {
    "robustness": ("Find rare, specific facts that are easily overlooked (a needle in a haystack) and build an "
                   "unambiguous ground truth from them.", "factuality", ("depth", "completeness")),
    "multi_hop": ("Identify a logical chain that needs at least two sections of the context and force the answer "
                  "to synthesize them.", "completeness", ("depth", "factuality")),
    "generation_quality": ("Assume the context is perfect and require deep reasoning: analysis, comparison or "
                           "causation.", "depth", ("completeness", "factuality")),
}
#: Appendix C.3: objective subtypes, their target shares, prefixes and requirements.
OBJECTIVE_SUBTYPES = {
    "Calculation": (0.30, "[Calculation]", "Extract ALL parameters from the context, use a formula the context "
                                            "supports, and show the calculation step by step with units."),
    "Fill": (0.25, "[Fill]", "Mark each blank as _____ and give the EXACT values, with conditions and units as "
                             "the context states them."),
    "Judge": (0.25, "[Judge]", "State one claim about a specific mechanism that needs multi-step understanding; "
                               "it may be true or false; the answer says True or False and why."),
    "Choice": (0.20, "[Choice]", "Give all options A) to D) on one line; only the context distinguishes them."),
}
#: Appendix C.3: subjective archetypes, rotated by question count mod 5.
ARCHETYPES = ("Definition/Specification: specific definitions or specification values",
              "Process Explanation: process sequences or event chains",
              "Causal Reasoning: reasons or purposes behind specifications",
              "Comparative Analysis: compare or contrast related concepts",
              "Problem Identification: potential problems, defects or limitations")

#: The JSON schema asked of the model (enforced where the server supports schemas). Evidence
#: comes first: the model quotes the context, then asks about what it quoted, then answers.
QA_SCHEMA = {
    "type": "object",
    "properties": {"evidence": {"type": "array", "items": {"type": "string", "maxLength": 600}, "minItems": 1},
                   "question": {"type": "string", "minLength": 15, "maxLength": 400},
                   "answer": {"type": "string", "minLength": 1, "maxLength": 800}},
    "required": ["evidence", "question", "answer"],
}

#: One-shot examples of the output, on a context unrelated to any corpus.
_EXAMPLE_CONTEXT = ("The SAC305 solder was reflowed at a peak temperature of 245 C. Voids covered 3% of the "
                    "joint area after reflow, down from 9% with the older profile.")
_EXAMPLES = {
    "OBJECTIVE": {"evidence": ["The SAC305 solder was reflowed at a peak temperature of 245 C."],
                  "question": "[Fill] The SAC305 solder was reflowed at a peak temperature of _____ C.",
                  "answer": "245 C"},
    "SUBJECTIVE": {"evidence": ["Voids covered 3% of the joint area after reflow, down from 9% with the older "
                                "profile."],
                   "question": "Why does the joint void fraction after reflow matter when comparing the two "
                               "reflow profiles?",
                   "answer": "The new profile cut voids from 9% to 3% of the joint area, so the joints are "
                             "denser and more reliable."},
}


def qa_schema(plan: "FormatPlan", max_tokens: int | None = None) -> dict:
    """The JSON schema for one attempt.

    The objective prefix is required by a ``pattern``; with ``max_tokens``, string
    lengths are capped so the whole object fits the token budget (about 3 characters
    per token: two evidence sentences of 25% each, question 15%, answer 35%), so that
    constrained decoding never stops inside an unfinished string.
    """
    props = {k: dict(v) for k, v in QA_SCHEMA["properties"].items()}
    props["evidence"]["items"] = dict(props["evidence"]["items"])
    if max_tokens:
        chars = 3 * max_tokens - 60  # minus the JSON keys and punctuation
        props["evidence"]["items"]["maxLength"] = max(80, int(0.25 * chars))
        props["evidence"]["maxItems"] = 2
        props["question"]["maxLength"] = max(60, int(0.15 * chars))
        props["answer"]["maxLength"] = max(40, int(0.35 * chars))
    if plan.question_format == "OBJECTIVE":
        # Not ".+": grammar converters (llama.cpp) read "." as any character, quotes included,
        # which lets the string swallow its own closing quote. JSON string characters only.
        # The length limit goes into the pattern: llama.cpp's converter reads a pattern and ignores maxLength.
        raw = OBJECTIVE_SUBTYPES[plan.subtype][1]
        limit = max(10, props["question"]["maxLength"] - len(raw) - 1)
        props["question"]["pattern"] = f'^{re.escape(raw)} [^"\\\\]{{1,{limit}}}$'
    return {**QA_SCHEMA, "properties": props}


@dataclass
class FormatPlan:
    """What the next question should be: objective subtype or subjective archetype."""

    question_format: str
    subtype: str | None = None
    archetype: str | None = None


def plan_format(accepted_formats: list[tuple[str, str | None]], objective_target: float = 0.5) -> FormatPlan:
    """Appendix C.3 balance tracking.

    Objective when ``r_obj = n_obj / (n_obj + n_subj)`` is below ``objective_target``;
    the objective subtype is the one furthest below its share (30/25/25/20); the
    subjective archetype rotates with the question count mod 5.

    Parameters
    ----------
    accepted_formats : list of (question_format, subtype) of accepted pairs
    """
    n = len(accepted_formats)
    objective = [s for f, s in accepted_formats if f == "OBJECTIVE"]
    r_obj = len(objective) / n if n else 0.0
    if r_obj < objective_target:
        deficits = {name: share * (len(objective) + 1) - objective.count(name)
                    for name, (share, _, _) in OBJECTIVE_SUBTYPES.items()}
        return FormatPlan("OBJECTIVE", subtype=max(deficits, key=deficits.get))
    return FormatPlan("SUBJECTIVE", archetype=ARCHETYPES[n % 5])


def build_prompt(context_text: str, test_type: str, plan: FormatPlan, enhanced: bool = True,
                 similarity_failures: int = 0, sources: list[str] | None = None) -> list[dict]:
    """The four-module prompt of Appendix C.1 as chat messages.

    Base template (role, context sections, JSON format), test-type module (Table 7),
    format specification (C.3) and, after more than 2 similarity failures, the
    diversity directive (C.4). ``enhanced=False`` gives the plain prompt of the
    ablation's groups A-D: role, context, test-type focus and JSON format only.
    """
    focus, primary, secondary = TEST_TYPE_MODULES[test_type]
    sections = context_text.split("\n\n")
    labels = sources or [f"Section {i + 1}" for i in range(len(sections))]
    context = "\n\n".join(f"[{label}]\n{text}" for label, text in zip(labels, sections))
    system = ("You are an AI Benchmark Scientist who writes questions that test retrieval-augmented generation "
              "systems on technical documents. Reply with one JSON object: first \"evidence\", the sentences "
              "you rely on, copied exactly from the CONTEXT; then \"question\"; then \"answer\".")
    example = _EXAMPLES[plan.question_format]
    parts = [f"EXAMPLE CONTEXT:\n{_EXAMPLE_CONTEXT}\nEXAMPLE OUTPUT:\n{json.dumps(example)}",
             f"TASK ({test_type}): {focus}"]
    if enhanced:
        parts.append(f"The question is scored mainly on {primary}, then {', '.join(secondary)}. The answer must "
                     "depend on the CONTEXT below, not on general knowledge or on the example.")
        if plan.question_format == "OBJECTIVE":
            _, prefix, rule = OBJECTIVE_SUBTYPES[plan.subtype]
            parts.append(f"FORMAT: an objective question that starts with {prefix}. {rule}")
        else:
            parts.append(f"FORMAT: an open (subjective) question in the style '{plan.archetype}'. The answer "
                         "explains with the context's specifics.")
        if similarity_failures > 2:
            style = plan.archetype or plan.subtype
            parts.append(f"DIVERSITY FOCUS: Previous {similarity_failures} uniqueness attempts suggest trying a new "
                         f"approach\nRECOMMENDED STYLE: Focus on \"{style}\"")
    else:
        prefix = OBJECTIVE_SUBTYPES[plan.subtype][1] if plan.question_format == "OBJECTIVE" else ""
        parts.append(f"Write one {'objective question starting with ' + prefix if prefix else 'open question'}.")
    parts.append(f"CONTEXT:\n{context}\nOUTPUT:")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


# ----------------------------------------------------------------- validation

_SPACES = re.compile(r"\s+")
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text).strip().lower()


def validate(answer_text: str, plan: FormatPlan, context_text: str) -> tuple[dict | None, str, str]:
    """VALID(q, a): parse and check a generated QA pair against its context.

    Returns
    -------
    (record, kind, message)
        ``record`` is ``{"question", "answer", "evidence"}`` when valid (kind ``""``);
        otherwise None and the failure kind: ``not-json``, ``missing-field``,
        ``wrong-type``, ``bad-prefix``, ``evidence-not-in-context`` or
        ``answer-not-in-context``.
    """
    try:
        question, answer, evidence = _parsed_pair(answer_text)
        _check_prefix(question, plan)
        evidence = _check_evidence(evidence, context_text)
        _check_values(question, answer, evidence, plan, context_text)
    except _Invalid as bad:
        return None, bad.kind, str(bad)
    return {"question": question, "answer": answer, "evidence": evidence}, "", ""


class _Invalid(ValueError):
    """A generated pair that fails one of :func:`validate`'s checks: its failure kind and what is wrong."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _parsed_pair(answer_text: str) -> tuple[str, str, list]:
    """The question, the answer and the evidence quotes of a generator's JSON, each of its type."""
    try:
        data = parse_json(answer_text)
    except ValueError as exc:
        raise _Invalid("not-json", str(exc)) from None
    if not isinstance(data, dict):
        raise _Invalid("wrong-type", f"expected a JSON object, got {type(data).__name__}")
    for name in ("question", "answer", "evidence"):
        if name not in data:
            raise _Invalid("missing-field", f"no {name!r} field (fields: {sorted(data)})")
    if not isinstance(data["question"], str) or not isinstance(data["answer"], str):
        raise _Invalid("wrong-type", "question and answer must be strings")
    evidence = [data["evidence"]] if isinstance(data["evidence"], str) else data["evidence"]
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise _Invalid("wrong-type", "evidence must be a list of strings")
    question, answer = data["question"].strip(), data["answer"].strip()
    if len(question) < 15 or not answer:
        raise _Invalid("missing-field", "empty or too short question or answer")
    return question, answer, evidence


def _check_prefix(question: str, plan: FormatPlan) -> None:
    """An objective question starts with its subtype's prefix."""
    if plan.question_format == "OBJECTIVE":
        prefix = OBJECTIVE_SUBTYPES[plan.subtype][1]
        if not question.startswith(prefix):
            raise _Invalid("bad-prefix", f"objective question must start with {prefix}: {question[:40]!r}")


def _check_evidence(evidence: list, context_text: str) -> list:
    """The non-empty quotes, each found in the context as one run of most of its words."""
    evidence = [e.strip() for e in evidence if e.strip()]
    if not evidence:
        raise _Invalid("evidence-not-in-context", "no evidence quoted")
    for quote in evidence:
        share = quoted_share(quote, context_text)
        if share < QUOTE_SHARE:
            raise _Invalid("evidence-not-in-context", f"evidence not found in the context ({share:.0%} of its words "
                                                      f"in one run): {quote[:60]!r}")
    return evidence


def _check_values(question: str, answer: str, evidence: list, plan: FormatPlan, context_text: str) -> None:
    """A Fill answer's values (those not in the question) come from the evidence or the context."""
    if plan.question_format == "OBJECTIVE" and plan.subtype == "Fill":
        numbers = [n for n in _NUMBERS.findall(answer) if n not in question]
        source = " ".join(_norm(e) for e in evidence) + " " + _norm(context_text)
        if numbers and not any(n in source for n in numbers):
            raise _Invalid("answer-not-in-context", f"none of the answer's values {numbers[:4]} is in the context")


# ------------------------------------------------------------------ the loop


@dataclass(frozen=True)
class GenerationConfig:
    """One generation setting (the ablation groups of Appendix D are five of these).

    Attributes
    ----------
    adaptive_temperature, adaptive_threshold : bool
        Eqs. 4-9 / 11-12, or the fixed values below.
    fixed_temperature, fixed_threshold : float
    enhanced_prompts : bool
        The full prompt of Appendix C, or the plain one.
    r_max : int
        Attempts per context (Algorithm 1's R_max).
    objective_target : float
        Objective share to keep (see the module notes).
    max_tokens : int
    json_schema : bool
        Ask the server for schema-constrained JSON.
    alpha : float
        Eq. 13's technical-term weight.
    """

    adaptive_temperature: bool = True
    fixed_temperature: float = 0.5
    adaptive_threshold: bool = True
    fixed_threshold: float = 0.65
    enhanced_prompts: bool = True
    r_max: int = 5
    objective_target: float = 0.5
    max_tokens: int = 1024
    json_schema: bool = True
    alpha: float = ALPHA


#: Appendix D, Table 8: the five ablation groups.
ABLATION_GROUPS = {
    "A": GenerationConfig(adaptive_temperature=False, adaptive_threshold=False, enhanced_prompts=False),
    "B": GenerationConfig(adaptive_temperature=True, adaptive_threshold=False, enhanced_prompts=False),
    "C": GenerationConfig(adaptive_temperature=False, adaptive_threshold=True, enhanced_prompts=False),
    "D": GenerationConfig(adaptive_temperature=True, adaptive_threshold=True, enhanced_prompts=False),
    "E": GenerationConfig(adaptive_temperature=True, adaptive_threshold=True, enhanced_prompts=True),
}

ATTEMPT_COLUMNS = ["context_id", "attempt", "precision_level", "temperature", "top_p", "threshold", "question_format",
                   "subtype", "outcome", "failure", "cause", "message", "max_weighted", "max_semantic", "cached",
                   "latency_s", "raw"]


@dataclass
class GenerationRun:
    """What :func:`generate_qa` made.

    Attributes
    ----------
    pairs : list of dict
        Accepted pairs in the FAB-Bench JSON schema (see :func:`write_pairs`).
    attempts : DataFrame
        Every attempt: context_id, attempt, precision_level, temperature, top_p,
        threshold, question_format, subtype, outcome (``accepted`` / ``failed``),
        failure kind, cause (for ``llm-error``: the LLM layer's documented cause, see
        :data:`fabnb.core.errors.CAUSES`), message, max_weighted, max_semantic, cached, latency_s, raw
        (the model's text, first 500 characters).
    seconds : float
        Wall time of the run.
    """

    pairs: list
    attempts: pd.DataFrame
    seconds: float = 0.0

    def frame(self) -> pd.DataFrame:
        """The accepted pairs as a tidy frame (see :func:`fabnb.data.datasets.qa_frame`)."""

        return qa_frame([parse_qa(p) for p in self.pairs])

    def summary(self) -> dict:
        """Pairs, attempts, retries (attempts beyond the first per context), failures by kind, seconds."""
        a = self.attempts
        retries = int(len(a) - a["context_id"].nunique()) if len(a) else 0
        return {"pairs": len(self.pairs), "attempts": len(a), "retries": retries,
                "failures": a.loc[a["outcome"] == "failed", "failure"].value_counts().to_dict(),
                "seconds": round(self.seconds, 2)}


def _sources(members: pd.DataFrame, chunks: pd.DataFrame | None, evidence: list[str]) -> list[dict]:
    """gold_context_sources: each evidence quote with the document and section it came from."""
    out = []
    texts = {}
    if chunks is not None:
        texts = chunks.set_index("chunk_id")[["text", "section"]].to_dict("index")
    for quote in evidence:
        doc, section = None, ""
        for m in members.itertuples():
            info = texts.get(m.chunk_id, {})
            if quoted_share(quote, info.get("text", "")) >= QUOTE_SHARE:
                doc, section = m.doc_id, info.get("section") or ""
                break
        out.append({"section_title": section if isinstance(section, str) else "", "evidence": quote,
                    "doc_id": doc or members["doc_id"].iloc[0], "has_image": False})
    return out


def _attempt(ctx, kind: str, plan, analysis, config, r: int, n_pairs: int, failures: int, sim_failures: int,
             seed: int) -> tuple[list, dict, dict]:
    """One attempt's prompt, sampling parameters (Eqs. 4-12) and log entry."""
    p, category = analysis.precision_level, analysis.dominant_category
    tau = (adaptive_temperature(p, n_pairs, category, failures, sim_failures)
           if config.adaptive_temperature else config.fixed_temperature)
    theta = similarity_threshold(p, r) if config.adaptive_threshold else config.fixed_threshold
    top_p = nucleus_top_p(tau) if config.adaptive_temperature else 0.95
    messages = build_prompt(ctx.text, kind, plan, config.enhanced_prompts, sim_failures)
    params = {"temperature": tau, "top_p": top_p, "max_tokens": config.max_tokens, "seed": seed + r}
    if config.json_schema:
        params["response_format"] = {"type": "json_object", "schema": qa_schema(plan, config.max_tokens)}
    entry = {"context_id": ctx.context_id, "attempt": r + 1, "precision_level": p, "temperature": tau,
             "top_p": top_p, "threshold": theta, "question_format": plan.question_format,
             "subtype": plan.subtype, "max_weighted": np.nan, "max_semantic": np.nan}
    return messages, params, entry


def _pair(record: dict, test_id: str, kind: str, plan, entry: dict, ctx, analysis, sources: list, model: str,
          config, generation_id: int, sim_failures: int) -> dict:
    """An accepted reply as a QA pair in FAB-Bench's format, with its generation metadata."""
    return {
        "test_id": test_id, "test_type": kind,
        "question_format": plan.question_format, "question": record["question"],
        "gold_context_sources": sources,
        "ground_truth_answer": record["answer"],
        "primary_metric": TEST_TYPE_MODULES[kind][1],
        "secondary_metrics": [m for m in ("factuality", "depth", "completeness", "relevance",
                                          "context_utilization", "support_quality")
                              if m != TEST_TYPE_MODULES[kind][1]],
        "generation_metadata": {
            "generation_id": generation_id, "attempt": entry["attempt"], "temperature_used": entry["temperature"],
            "top_p_used": entry["top_p"], "max_tokens_used": config.max_tokens,
            "similarity_failures": sim_failures, "similarity_threshold_used": entry["threshold"],
            "context_type": ctx.strategy, "context_id": ctx.context_id,
            "model": model, "subtype": plan.subtype, "archetype": plan.archetype,
            "semiconductor_analysis": {
                "technical_density": analysis.technical_density, "precision_level": analysis.precision_level,
                "dominant_category": analysis.dominant_category, "high_weight_presence": analysis.high_weight_presence,
                "total_tech_terms": analysis.n_matches,
                "categories_found": {k: round(v, 3) for k, v in analysis.category_counts.items()}},
            "config": asdict(config),
        },
    }


def generate_qa(contexts, llm: LLM, n: int, *, test_type: str | None = None, kb=None, chunks=None,
                config: GenerationConfig = GenerationConfig(), seed: int = 0, error_policy: str = "record",
                progress: bool = False, id_start: int = 1) -> GenerationRun:
    """Algorithm 1: generate ``n`` QA pairs from synthesized contexts.

    Parameters
    ----------
    contexts : fabnb.corpus.synthesis.Contexts
        Contexts in the order to use them (one pair at most per context).
    llm : fabnb.models.llm.LLM
        Any OpenAI-compatible model (the embedded one by default in notebooks).
    n : int
        Pairs wanted (stops early when contexts run out).
    test_type : str, optional
        ``robustness``, ``multi_hop`` or ``generation_quality``; default each
        context's own (from its strategy).
    kb : fabnb.corpus.terms.KnowledgeBase, optional
        Default the paper's.
    chunks : DataFrame, optional
        The chunk frame, to name each evidence quote's document and section.
    config : GenerationConfig
    seed : int
        Sent to the server with each call (and part of the cache key).
    error_policy : {"record", "raise"}
        What an LLM call failure does after its retries: logged as a failed
        attempt, or raised. Invalid output is always a logged failure.
    progress : bool
        Show a progress bar over accepted pairs, with each attempt's line (context, attempt, accepted or rejected
        and why, temperature) beside it; the same lines go to ``logging`` (``fabnb.qa.generation``, INFO).

    Returns
    -------
    GenerationRun
    """

    if error_policy not in ("record", "raise"):
        raise ValueError(f"error_policy must be 'record' or 'raise', not {error_policy!r}")
    kb = kb or KnowledgeBase.default()
    started = time.perf_counter()
    pairs, accepted_questions, formats, log = [], [], [], []
    counters: dict[str, int] = {}
    bar, own_bar = stage_bar(progress, n, "QA pairs")
    for ctx in contexts.contexts.itertuples():
        if len(pairs) >= n:
            break
        kind = test_type or ctx.test_type
        analysis = kb.analyse(ctx.text)
        members = contexts.show(ctx.context_id)
        failures, sim_failures = 0, 0
        for r in range(config.r_max):
            plan = plan_format(formats, config.objective_target)
            messages, params, entry = _attempt(ctx, kind, plan, analysis, config, r, len(pairs), failures,
                                               sim_failures, seed)
            _tell(bar, entry, "asking")  # slow is told from stuck: the attempt in flight, before its reply
            theta = entry["threshold"]
            try:
                done = llm.complete(messages, **params)
            except LLMError as exc:
                if error_policy == "raise":
                    raise
                # Never cached (the LLM layer stores only replies): a rerun asks this attempt again.
                log.append({**entry, "outcome": "failed", "failure": "llm-error", "cause": exc.cause,
                            "message": str(exc), "cached": False, "latency_s": 0.0, "raw": ""})
                _tell(bar, log[-1], "rejected")
                failures += 1
                continue
            entry.update(cached=done.cached, latency_s=done.latency_s, raw=done.text[:500])
            record, failure, message = validate(done.text, plan, ctx.text)
            if record is not None:
                failure, message = _unique(record["question"], accepted_questions, theta, kb, config.alpha, entry)
            if failure:
                log.append({**entry, "outcome": "failed", "failure": failure, "message": message})
                _tell(bar, log[-1], "rejected")
                failures += 1
                sim_failures = sim_failures + 1 if failure in ("too-similar", "semantic-duplicate") else 0
                continue
            prefix = TEST_TYPES[kind]
            counters[prefix] = counters.get(prefix, id_start - 1) + 1
            question = record["question"]
            pairs.append(_pair(record, f"{prefix}_{counters[prefix]:03d}", kind, plan, entry, ctx, analysis,
                               _sources(members, chunks, record["evidence"]), llm.model, config, len(pairs) + 1,
                               sim_failures))
            accepted_questions.append(question)
            formats.append((plan.question_format, plan.subtype))
            log.append({**entry, "outcome": "accepted", "failure": "", "message": ""})
            _tell(bar, log[-1], "accepted")
            if bar is not None:
                bar.update(1)
            break
    if own_bar:
        bar.close()
    return GenerationRun(pairs, pd.DataFrame(log, columns=ATTEMPT_COLUMNS), time.perf_counter() - started)


def _tell(bar, entry: dict, outcome: str) -> str:
    """One attempt's line (context, attempt, outcome and why, temperature): on the bar and in the log
    (``logging``'s ``fabnb.qa.generation``, INFO). QA generation on a slow model once showed "QA pairs: 0/4" for
    15 minutes with nothing else."""
    import logging

    why = f" ({entry['failure']}: {str(entry.get('message') or '')[:80]})" if entry.get("failure") else ""
    line = (f"{entry['context_id']} attempt {entry['attempt']}: {outcome}{why}, temperature "
            f"{entry['temperature']:.2f}")
    logging.getLogger(__name__).info(line)
    if bar is not None and hasattr(bar, "set_postfix_str"):
        bar.set_postfix_str(line, refresh=True)
    return line


def _unique(question: str, accepted: list, theta: float, kb, alpha: float, entry: dict) -> tuple[str, str]:
    """Eq. 13 against the accepted questions: ``("", "")`` for a new question, else the failure and why; the
    similarities go into the attempt's log ``entry``."""
    check = uniqueness(question, accepted, theta, kb, alpha)
    entry.update(max_weighted=check["max_weighted"], max_semantic=check["max_semantic"])
    if check["unique"]:
        return "", ""
    return check["reason"], (f"max weighted similarity {check['max_weighted']:.3f}, semantic "
                             f"{check['max_semantic']:.3f}, threshold {theta}")


def run_ablation(contexts, llm: LLM, n: int, groups=("A", "B", "C", "D", "E"), **kwargs) -> pd.DataFrame:
    """Appendix D / Table 8: the same contexts through each ablation group.

    Returns
    -------
    DataFrame
        One row per group: group, pairs, attempts, retries, seconds, failures
        (dict by kind), plus the group's settings. Expert ratings of the pairs
        (accuracy, relevance, difficulty, diversity) come from the rating stage.
    """
    rows = []
    for g in groups:
        run = generate_qa(contexts, llm, n, config=ABLATION_GROUPS[g], **kwargs)
        s = run.summary()
        cfg = ABLATION_GROUPS[g]
        rows.append({"group": g, **s, "adaptive_temperature": cfg.adaptive_temperature,
                     "adaptive_threshold": cfg.adaptive_threshold, "enhanced_prompts": cfg.enhanced_prompts})
    return pd.DataFrame(rows)


FOLDERS = {"robustness": "1_retrieval_robustness", "multi_hop": "2_retrieval_multihop",
           "generation_quality": "3_generation_quality"}


def write_pairs(pairs: list[dict], folder: str | Path) -> list[Path]:
    """Write pairs as FAB-Bench JSON files (``QAs/<type folder>/<test_id>.json``), readable by
    :func:`fabnb.data.datasets.read_qa_files`. Each file is written whole, then renamed into place.

    Examples
    --------
    >>> import json, tempfile
    >>> from fabnb.data.datasets import fab_bench_dir, read_qa_files
    >>> record = json.loads((fab_bench_dir() / "QAs" / "1_retrieval_robustness" / "ROB_001.json").read_text())
    >>> folder = tempfile.mkdtemp()
    >>> [p.name for p in write_pairs([record], folder)], len(read_qa_files(folder))
    (['ROB_001.json'], 1)
    """
    root = Path(folder) / "QAs"
    paths = []
    for pair in pairs:
        path = root / FOLDERS[pair["test_type"]] / f"{pair['test_id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(pair, indent=2, ensure_ascii=False))
        paths.append(path)
    return paths
