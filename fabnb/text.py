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

__all__ = ["QUOTE_SHARE", "quoted_share", "word_tokens"]

_TOKENS = re.compile(r"[a-z0-9]+(?:[.\-][a-z0-9]+)*")

#: Share of a quote's words that must appear as one contiguous run in the context.
QUOTE_SHARE = 0.8


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, inner ``.`` or ``-`` kept), as Eq. 13 and quote checks use them.

    >>> word_tokens("Etch-rate of 5.2 nm/cycle")
    ['etch-rate', 'of', '5.2', 'nm', 'cycle']
    """
    return _TOKENS.findall(text.lower())


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
