"""The domain knowledge base and technical density (FAB-Bench Section 3.3, Appendix A, B.1).

A knowledge base is a table of terms, each in a weighted category. The default is
the paper's semiconductor base (Appendix A, Table 1): 7 categories, weights 1.1-1.7.
A user brings their own for another domain as a CSV or YAML of term, category, weight.

Readings of the paper chosen here (the paper leaves them open):

- Category keys follow the released FAB-Bench metadata (``dominant_category``):
  ``parameters`` (Performance Parameters), ``processes`` (Process Nodes),
  ``manufacturing`` (Manufacturing Processes), ``devices``, ``materials``,
  ``testing``, ``applications``. Eq. 1's "{parameters, processes}" are therefore
  Performance Parameters and Process Nodes, the two highest weights (A.8 says so).
- Technical density rho(d): the sum, over every term occurrence, of its category
  weight, divided by the number of words. A term listed in two categories (ASIC)
  counts once, at the higher weight, and toward both categories' counts.
- High-weight presence omega_h(d): for each high-weight category, its weight times
  the number of *distinct* terms of that category present (Eq. 1 counts the set
  ``{t in T_c : n(t, d) > 0}``).
- Words are runs of letters and digits (with inner ``.``, ``'`` or ``-``).

Matching (longest term first, by hash lookup of atom runs, so it is linear in the text):

- text and terms are cut into atoms (runs of letters and digits, a decimal point kept
  inside numbers); a term matches a run of whole atoms that spells it, so ``5nm`` does
  not match inside ``25nm``, and spaces, hyphens and dashes between atoms do not matter
  (``gate-all-around`` = ``gate all around``, ``low-k`` = ``low k`` = ``lowk``,
  ``13.5nm`` = ``13.5 nm``, ``I-V curve`` = ``I–V curve``);
- subscript digits read as digits (``HfO2`` = ``HfO₂``);
- terms of up to 3 characters, and terms with a capital letter of up to 5
  characters (``RF``, ``gm``, ``Vth``, ``HfO2``), are case-sensitive; longer terms
  are not, and may take a plural ``s``/``es`` when they end in a lowercase letter.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

import pandas as pd

from ..core.errors import FabnbError
from ..core.files import MAX_FILE_BYTES, FileRefused, read_text

__all__ = ['HIGH_WEIGHT_CATEGORIES', 'Highlighted', 'KnowledgeBase', 'KnowledgeBaseError', 'PRECISION_LEVELS',
           'TermAnalysis', 'precision_level']

#: Eq. 1's high-weight categories in the default knowledge base.
HIGH_WEIGHT_CATEGORIES: tuple[str, ...] = ("parameters", "processes")
PRECISION_LEVELS: tuple[str, ...] = ("high", "medium", "low")

_SUBSCRIPTS = str.maketrans("₀₁₂₃₄₅₆₇₈₉", "0123456789")
_WORD = re.compile(r"[^\W_]+(?:['.\-][^\W_]+)*")
# Atoms: runs of letters and digits (a decimal point kept inside numbers). Spaces, hyphens,
# dashes and other punctuation separate atoms; a term matches any run of atoms that spells it.
_ATOM = re.compile(r"[^\W_]+(?:\.[0-9]+)*")


class KnowledgeBaseError(FabnbError, ValueError):
    """A knowledge-base file that cannot be used as it is."""


def _atoms(text: str) -> list[str]:
    return [a.translate(_SUBSCRIPTS) for a in _ATOM.findall(text)]


def _case_sensitive(term: str) -> bool:
    # Short terms and short capitalised ones (RF, gm, Vth, HfO2) would collide with ordinary words.
    return len(term) <= 3 or (any(ch.isupper() for ch in term) and len(term) <= 5)


@dataclass(frozen=True)
class TermAnalysis:
    """Technical-content analysis of one text (the ``semiconductor_analysis`` of FAB-Bench metadata)."""

    technical_density: float
    high_weight_presence: float
    precision_level: str
    dominant_category: str | None
    category_counts: dict = field(default_factory=dict)
    n_words: int = 0
    n_matches: int = 0


@dataclass(frozen=True)
class KnowledgeBase:
    """Terms in weighted categories, and a matcher over them.

    Parameters
    ----------
    terms : DataFrame
        Columns term, category, weight (one row per term and category).
    high_weight_categories : tuple of str
        The categories of Eq. 1's omega_h.
    name : str
        Where it came from, for messages.

    Examples
    --------
    >>> kb = KnowledgeBase.default()
    >>> kb.find("The Vth of a FinFET with an HfO₂ gate at 13.5 nm").term.tolist()
    ['Vth', 'FinFET', 'HfO2', '13.5nm']
    """

    terms: pd.DataFrame
    high_weight_categories: tuple[str, ...] = HIGH_WEIGHT_CATEGORIES
    name: str = "knowledge base"

    # ------------------------------------------------------------ construction
    @classmethod
    def default(cls) -> "KnowledgeBase":
        """The paper's semiconductor base (Appendix A): 431 listed entries, 428 distinct terms.

        Built once per process (it is read-only in use), so calling this in a loop is free.
        """
        return _default_kb()

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str = "knowledge base",
                   high_weight_categories: tuple[str, ...] | None = None) -> "KnowledgeBase":
        """Check a term table and build a knowledge base from it.

        Raises
        ------
        KnowledgeBaseError
            Naming the row and field of a missing term, category or a weight that is not a positive number.
        """
        missing = [c for c in ("term", "category", "weight") if c not in frame.columns]
        if missing:
            raise KnowledgeBaseError(f"{name}: missing column(s) {missing}; a knowledge base needs term, "
                                     "category, weight.")
        rows = []
        for i, r in frame.reset_index(drop=True).iterrows():
            term, cat = str(r["term"]).strip() if pd.notna(r["term"]) else "", r["category"]
            if not term:
                raise KnowledgeBaseError(f"{name}, row {i + 1}: empty term.")
            if pd.isna(cat) or not str(cat).strip():
                raise KnowledgeBaseError(f"{name}, row {i + 1} ({term!r}): empty category.")
            try:
                weight = float(r["weight"])
            except (TypeError, ValueError):
                raise KnowledgeBaseError(f"{name}, row {i + 1} ({term!r}): weight {r['weight']!r} is not a "
                                         "number.") from None
            if not weight > 0:
                raise KnowledgeBaseError(f"{name}, row {i + 1} ({term!r}): weight must be positive, not {weight}.")
            rows.append({"term": term, "category": str(cat).strip(), "weight": weight})
        terms = pd.DataFrame(rows).drop_duplicates(["term", "category"]).reset_index(drop=True)
        if terms.groupby("category")["weight"].nunique().max() > 1:
            bad = terms.groupby("category")["weight"].nunique().idxmax()
            raise KnowledgeBaseError(f"{name}: category {bad!r} has several weights; give each category one weight.")
        cats = tuple(terms["category"].unique())
        high = tuple(c for c in (high_weight_categories or HIGH_WEIGHT_CATEGORIES) if c in cats)
        if not high and high_weight_categories is None:
            # A base of one's own domain names its own categories: Eq. 1's high-weight pair is then its two
            # heaviest (in the paper's base, parameters and processes are the two highest weights, A.8). Without
            # this its omega_h was always 0 and every document of a user's corpus came out "low".
            by_weight = terms.drop_duplicates("category").sort_values("weight", ascending=False, kind="stable")
            high = tuple(by_weight["category"].head(2))
        return cls(terms, high, name)

    @classmethod
    def from_file(cls, path: str | Path, high_weight_categories: tuple[str, ...] | None = None) -> "KnowledgeBase":
        """Read a CSV (term, category, weight) or YAML knowledge base.

        YAML takes either a list of ``{term, category, weight}`` records or a mapping
        ``{category: {weight: w, terms: [...]}}``. Eq. 1's high-weight categories are
        ``high_weight_categories``, else the paper's pair where the file has them, else the
        file's two heaviest categories.

        Examples
        --------
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "kb.csv"
        >>> _ = path.write_text("term,category,weight\\nbeta blocker,drugs,1.6\\nQT interval,measures,1.7\\n"
        ...                     "patient,general,1.0\\n")
        >>> kb = KnowledgeBase.from_file(path)
        >>> kb.high_weight_categories
        ('measures', 'drugs')
        >>> kb.analyse("A beta blocker prolongs the QT interval.").high_weight_presence
        3.3
        """
        path = Path(path)
        if not path.exists():
            raise KnowledgeBaseError(f"{path}: no such file.")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            try:
                data = yaml.safe_load(read_text(path, setting="knowledge base",
                                                max_bytes=MAX_FILE_BYTES["knowledge_base"]))
            except FileRefused as exc:
                raise KnowledgeBaseError(str(exc)) from None
            except yaml.YAMLError as exc:
                raise KnowledgeBaseError(f"{path}: not valid YAML ({exc}).") from None
            if isinstance(data, dict):
                records = []
                for cat, spec in data.items():
                    if not isinstance(spec, dict) or "weight" not in spec or "terms" not in spec:
                        raise KnowledgeBaseError(f"{path}: category {cat!r} needs 'weight' and 'terms'.")
                    records += [{"term": t, "category": cat, "weight": spec["weight"]} for t in spec["terms"]]
                frame = pd.DataFrame(records)
            elif isinstance(data, list):
                frame = pd.DataFrame(data)
            else:
                raise KnowledgeBaseError(f"{path}: expected a list of records or a mapping of categories.")
        else:
            import io

            try:
                frame = pd.read_csv(io.StringIO(read_text(path, setting="knowledge base",
                                                          max_bytes=MAX_FILE_BYTES["knowledge_base"])))
            except FileRefused as exc:
                raise KnowledgeBaseError(str(exc)) from None
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
                raise KnowledgeBaseError(f"{path}: not a readable CSV ({exc}).") from None
        return cls.from_frame(frame, str(path), high_weight_categories)

    # ---------------------------------------------------------------- matching
    @cached_property
    def weights(self) -> dict[str, float]:
        """Category -> weight."""
        return self.terms.groupby("category", sort=False)["weight"].first().to_dict()

    @cached_property
    def _index(self) -> tuple[dict, dict, int, set]:
        """Lookup tables: exact keys, case-folded keys, the longest term in atoms, key prefixes.

        A text may cut a term into more atoms than the term has ("5 nm") or fewer ("lowk"),
        so candidates are screened by the first one or two characters of the key, not by atoms.
        """
        exact, folded, longest, prefixes = {}, {}, 1, set()
        for term in self._categories:
            atoms = _atoms(term)
            key = "".join(atoms)
            longest = max(longest, len(atoms) + 1)  # +1: a text may split one atom in two
            if _case_sensitive(term):
                exact.setdefault(key, term)
            else:
                key = key.lower()
                for suffix in ("", "s", "es") if term[-1].isalpha() and term[-1].islower() else ("",):
                    folded.setdefault(key + suffix, term)
            prefixes.update((key[:1], key[:2]))
        return exact, folded, longest, prefixes

    @cached_property
    def _categories(self) -> dict[str, tuple[str, ...]]:
        return self.terms.groupby("term", sort=False)["category"].agg(tuple).to_dict()

    def find(self, text: str) -> pd.DataFrame:
        """Every term occurrence in ``text``, non-overlapping, longest first.

        Returns
        -------
        DataFrame
            start, end (character offsets in ``text``), text (as written), term,
            categories (tuple), weight (the highest of its categories).
        """
        exact, folded, longest, prefixes = self._index
        cats = self._categories
        spans = [(m.start(), m.end(), m.group(0).translate(_SUBSCRIPTS)) for m in _ATOM.finditer(text)]
        rows, i, n = [], 0, len(spans)
        while i < n:
            head = spans[i][2][:2]
            hit = None
            if head in prefixes or head.lower() in prefixes:
                for width in range(min(longest, n - i), 0, -1):
                    key = "".join(a for _, _, a in spans[i:i + width])
                    term = exact.get(key) or folded.get(key.lower())
                    if term is not None:
                        hit = (width, term)
                        break
            if hit is None:
                i += 1
                continue
            width, term = hit
            start, end = spans[i][0], spans[i + width - 1][1]
            rows.append({"start": start, "end": end, "text": text[start:end], "term": term,
                         "categories": cats[term], "weight": max(self.weights[c] for c in cats[term])})
            i += width
        return pd.DataFrame(rows, columns=["start", "end", "text", "term", "categories", "weight"])

    def analyse(self, text: str) -> TermAnalysis:
        """Technical density, high-weight presence and precision level of a text (Eq. 1).

        Examples
        --------
        >>> kb = KnowledgeBase.default()
        >>> a = kb.analyse("Leakage current and threshold voltage of FinFET devices at 5nm.")
        >>> a.precision_level, a.dominant_category
        ('high', 'parameters')
        """
        found = self.find(text)
        n_words = len(_WORD.findall(text))
        counts = {c: 0.0 for c in self.weights}
        for cats, weight in zip(found["categories"], found["weight"]):
            for c in cats:
                counts[c] += self.weights[c]
        density = float(found["weight"].sum()) / n_words if n_words else 0.0
        omega = 0.0
        for c in self.high_weight_categories:
            present = {t for t, cats in zip(found["term"], found["categories"]) if c in cats}
            omega += self.weights[c] * len(present)
        dominant = max(counts, key=counts.get) if found.shape[0] else None
        return TermAnalysis(density, omega, precision_level(density, omega), dominant,
                            counts, n_words, int(found.shape[0]))

    def analyse_frame(self, frame: pd.DataFrame, text: str = "text") -> pd.DataFrame:
        """:meth:`analyse` for every row of ``frame``; returns a new frame.

        Returns
        -------
        DataFrame
            ``frame``'s columns plus technical_density, high_weight_presence,
            precision_level, dominant_category, n_words, n_terms and one
            ``terms[<category>]`` column per category (weighted occurrence counts).
        """
        records = []
        for value in frame[text]:
            a = self.analyse(value)
            rec = {"technical_density": a.technical_density, "high_weight_presence": a.high_weight_presence,
                   "precision_level": a.precision_level, "dominant_category": a.dominant_category,
                   "n_words": a.n_words, "n_terms": a.n_matches}
            rec.update({f"terms[{c}]": v for c, v in a.category_counts.items()})
            records.append(rec)
        return pd.concat([frame.reset_index(drop=True), pd.DataFrame(records)], axis=1)

    def highlight(self, text: str) -> "Highlighted":
        """``text`` as HTML with every term marked and titled by its categories.

        All of ``text`` is escaped, so nothing in a document can inject markup.
        The result displays in Jupyter; ``str()`` gives the HTML.

        Examples
        --------
        >>> str(KnowledgeBase.default().highlight("<b>EUV</b>"))[:60]
        '<div class="fabnb-terms">&lt;b&gt;<mark class="fabnb-term fa'
        """

        found = self.find(text)
        parts, pos = [], 0
        for r in found.itertuples():
            cats = " ".join(r.categories)
            parts.append(html.escape(text[pos:r.start]))
            parts.append(f'<mark class="fabnb-term fabnb-{html.escape(r.categories[0])}" '
                         f'title="{html.escape(r.term)}: {html.escape(cats)}">{html.escape(r.text)}</mark>')
            pos = r.end
        parts.append(html.escape(text[pos:]))
        return Highlighted('<div class="fabnb-terms">' + "".join(parts) + "</div>")

    def summary(self) -> pd.DataFrame:
        """Per category: weight, listed entries and distinct terms."""
        g = self.terms.groupby("category", sort=False)
        return pd.DataFrame({"weight": g["weight"].first(), "terms": g["term"].nunique()}).reset_index()


class Highlighted(str):
    """HTML of a highlighted text; shows as HTML in Jupyter."""

    _STYLE = ("<style>.fabnb-terms{white-space:pre-wrap;line-height:1.5}.fabnb-term{border-radius:3px;padding:0 2px}"
              ".fabnb-parameters{background:#fde2e2}.fabnb-processes{background:#fdebd0}"
              ".fabnb-manufacturing{background:#fcf3cf}.fabnb-devices{background:#d5f5e3}"
              ".fabnb-materials{background:#d6eaf8}.fabnb-testing{background:#e8daef}"
              ".fabnb-applications{background:#eaeded}</style>")

    def _repr_html_(self) -> str:
        return self._STYLE + str(self)


@lru_cache(maxsize=1)
def _default_kb() -> KnowledgeBase:
    with resources.files("fabnb.data.published").joinpath("knowledge_base_terms.csv").open(encoding="utf-8") as fh:
        listing = pd.read_csv(fh)
    return KnowledgeBase.from_frame(listing, "FAB-Bench Appendix A")


def precision_level(density: float, high_weight_presence: float) -> str:
    """Eq. 1: high if rho > 0.20 or omega_h > 8; medium if rho > 0.12 or omega_h > 4; else low.

    Examples
    --------
    >>> precision_level(0.21, 0), precision_level(0.0, 4.5), precision_level(0.12, 4)
    ('high', 'medium', 'low')
    """
    if density > 0.20 or high_weight_presence > 8:
        return "high"
    if density > 0.12 or high_weight_presence > 4:
        return "medium"
    return "low"
