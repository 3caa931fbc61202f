"""Which language a text is in: the judge sanity flag ``language`` (an answer in another language than its
questions) reads it.

The detector is py3langid (Lui & Baldwin 2012, *langid.py*, 97 languages), whose model ships inside its wheel: nothing
is downloaded on first use. Loading the model takes about 1 s and 100 MB, so it is loaded on the first text that
needs it: an English answer to English questions is recognised by its function words and never reaches it.

Examples
--------
>>> language_of("La mobilité des électrons augmente avec la contrainte de traction dans le silicium.")[0]
'fr'
>>> looks_english("The mobility of electrons in strained silicon rises with the tensile strain.")
True
"""

from __future__ import annotations

import functools
import re

__all__ = ["LANGUAGE_CONFIDENCE", "MIN_LANGUAGE_LETTERS", "common_language", "language_of", "looks_english",
           "other_language", "sure_language"]

#: A text is read for its language from this many letters (any script): below, "yes" or "1200 cm2/V·s" carry too
#: little (py3langid gives such texts 3-5% to its best guess).
MIN_LANGUAGE_LETTERS = 40
#: The detector's normalised probability from which a text counts as in a language: at 0.95 a French sentence of
#: 47 letters passes (0.99) and a short English one does not (0.85 for "Electron mobility rises with tensile strain
#: in silicon.").
LANGUAGE_CONFIDENCE = 0.95

_ENGLISH = frozenset("the of and a to in is for that with as by on are this be it or from at which an was were "
                     "these its has have not can".split())
_WORDS = re.compile(r"[^\W\d_]+")


@functools.lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language_of(text: str) -> tuple[str, float]:
    """The text's most likely language (ISO 639-1 code) and its normalised probability.

    >>> language_of("硅中的电子迁移率随着拉伸应变的增加而显著提高，这一效应在现代晶体管的设计中被广泛利用。")[0]
    'zh'
    """
    lang, p = _identifier().classify(text)
    return str(lang), float(p)


def looks_english(text: str) -> bool:
    """Whether at least a fifth of the text's words (8 or more) are English function words ("the", "of", ...):
    English prose has 25-45%, other languages' prose near none. Cheap, and no model."""
    words = [w.lower() for w in _WORDS.findall(text)]
    return len(words) >= 8 and sum(w in _ENGLISH for w in words) / len(words) >= 0.2


def _letters(text: str) -> int:
    return sum(len(w) for w in _WORDS.findall(text))


def common_language(texts, limit: int = 20_000, majority: float = 2 / 3) -> str | None:
    """The language most of the texts are in (the questions of a run), or None where no language holds
    ``majority`` of the texts long enough to tell.

    Each text votes alone (a joined text of two languages reads as neither); the first ``limit`` letters decide.

    >>> common_language(["What limits the mobility of electrons in strained silicon, and by how much?",
    ...                  "Which process step sets the thickness of the gate oxide in this flow?"])
    'en'
    >>> common_language(["What limits the mobility of electrons in strained silicon, and by how much?",
    ...                  "Quelle étape du procédé fixe l'épaisseur de l'oxyde de grille dans ce flux ?"]) is None
    True
    """
    votes: dict[str, int] = {}
    seen = 0
    for text in texts:
        if not isinstance(text, str) or (n := _letters(text)) < MIN_LANGUAGE_LETTERS:
            continue
        seen += n
        lang, p = ("en", 1.0) if looks_english(text) else language_of(text)
        if p >= LANGUAGE_CONFIDENCE:
            votes[lang] = votes.get(lang, 0) + 1
        if seen >= limit:
            break
    if not votes:
        return None
    lang = max(votes, key=votes.get)
    return lang if votes[lang] >= majority * sum(votes.values()) else None


def sure_language(text) -> str:
    """The language a text is surely in ("en" for English prose, known by its function words without the model),
    or "" when the text is too short or the detector unsure. The grid stores it with each answer
    (``answer_language``), so a results view does not run the detector over 8,800 answers.

    >>> sure_language("La mobilité des électrons augmente avec la contrainte de traction dans le silicium.")
    'fr'
    >>> sure_language("Strain.")
    ''
    """
    if not isinstance(text, str) or _letters(text) < MIN_LANGUAGE_LETTERS:
        return ""
    if looks_english(text):
        return "en"
    lang, p = language_of(text)
    return lang if p >= LANGUAGE_CONFIDENCE else ""


def other_language(text, expected: str | None) -> str | None:
    """The language a text is surely in when it is not ``expected``; None when it is, or when the text is too short
    or the detector unsure (:func:`sure_language`).

    >>> other_language("La mobilité des électrons augmente avec la contrainte de traction dans le silicium.", "en")
    'fr'
    >>> other_language("Electron mobility rises with strain.", "en") is None
    True
    """
    lang = sure_language(text) if expected is not None else ""
    return lang if lang and lang != expected else None
