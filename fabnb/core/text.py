"""Words of a text, as the checks that compare texts read them: word tokens and quoted shares.

Eq. 13's near-duplicate test, the generators' quote checks, the curation groups and the
RAG-TESTER oracle all compare texts by these word tokens.

Examples
--------
>>> word_tokens("Etch-rate of 5.2 nm/cycle")
['etch-rate', 'of', '5.2', 'nm', 'cycle']
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

__all__ = ["QUOTE_SHARE", "ngram_repetition", "quoted_share", "repetition_share", "word_measures", "word_tokens"]

_TOKENS = re.compile(r"[a-z0-9]+(?:[.\-][a-z0-9]+)*")

#: Share of a quote's words that must appear as one contiguous run in the context.
QUOTE_SHARE = 0.8


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, inner ``.`` or ``-`` kept), as Eq. 13 and quote checks use them.

    >>> word_tokens("Etch-rate of 5.2 nm/cycle")
    ['etch-rate', 'of', '5.2', 'nm', 'cycle']
    """
    return _TOKENS.findall(text.lower())


def ngram_repetition(words: list[str], n: int = 3) -> float:
    """Share of the ``n``-grams of ``words`` (:func:`word_tokens`' list) that repeat an earlier one (0 under ``n``).

    >>> ngram_repetition(["a", "b", "c", "a", "b", "c"])
    0.25
    """
    grams = len(words) - n + 1
    # zip builds the n-grams without a slice each: the slices were a quarter of the results viewer's cold open.
    return 1.0 - len(set(zip(*(words[i:] for i in range(n))))) / grams if grams > 0 else 0.0


def word_measures(text) -> tuple[int, float]:
    """The word count and the word-trigram repetition share of ``text`` (0 and 0.0 for no text), from one
    tokenization: what the results store keeps with each answer and the judge's sanity flags read.

    >>> word_measures("a b c a b c")
    (6, 0.25)
    """
    words = word_tokens(str(text or ""))
    return len(words), ngram_repetition(words)


def repetition_share(text, n: int = 3) -> float:
    """Share of the word ``n``-grams of ``text`` that repeat an earlier one (0 for fewer than ``n`` words).

    >>> round(repetition_share("1200 cm2/V·s " * 7), 2), repetition_share("Mobility rises with strain.")
    (0.85, 0.0)
    """
    return ngram_repetition(word_tokens(str(text or "")), n)


def quoted_share(quote: str, context: str) -> float:
    """Share of ``quote``'s words found as one contiguous run of ``context``'s words.

    A faithful quote scores 1.0; one with a word added or dropped at an edge
    ("The chemical ..." for "Chemical ...") still scores high; a paraphrase does not.

    >>> quoted_share("The etch rate was 5 A per cycle", "Etch rate was 5 A per cycle at 900 V")
    0.875
    """
    q, c = word_tokens(quote), word_tokens(context)
    if not q:
        return 0.0
    match = SequenceMatcher(None, q, c, autojunk=False).find_longest_match(0, len(q), 0, len(c))
    return match.size / len(q)
