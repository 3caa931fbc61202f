"""What calls cost: the price table as data (each price with its date and source), and the arithmetic.

Prices are dollars per million ``input`` (prompt) and ``output`` (completion) tokens,
the vocabulary of the experiment file's ``[prices]`` table and of :class:`fabnb.models.llm.LLM`.

Examples
--------
>>> cost_of("gpt-4o-mini", {}, input_tokens=1_000_000, output_tokens=0)
0.15
>>> cost_of("my-own-model", {}, 10, 10) is None
True
"""

from __future__ import annotations

__all__ = ["PRICES", "cost_of", "price_of", "price_text"]

#: Dollars per million input and output tokens, with the date the vendor's price took effect and where it
#: is published. Prices change: override or add models under ``[prices]`` in the experiment file.
PRICES: dict[str, dict] = {
    "gpt-4o": {"input": 2.50, "output": 10.00, "date": "2024-08-06", "source": "https://openai.com/api/pricing/"},
    "gpt-4o-mini": {"input": 0.15, "output": 0.60, "date": "2024-07-18", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1": {"input": 2.00, "output": 8.00, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40, "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "deepseek-chat": {"input": 0.28, "output": 0.42, "date": "2025-09-29",
                      "source": "https://api-docs.deepseek.com/quick_start/pricing (V3.2-Exp, cache miss)"},
    "gemini-2.5-flash": {"input": 0.30, "output": 2.50, "date": "2025-06-17",
                         "source": "https://ai.google.dev/gemini-api/docs/pricing (text input)"},
    "embedded": {"input": 0.0, "output": 0.0, "date": "", "source": "the embedded local model: no charge"},
}


def price_of(model: str, prices: dict | None = None) -> dict | None:
    """The price record of a model (the file's ``[prices]`` first, then :data:`PRICES`); None when unknown.

    >>> price_of("gpt-4o-mini")["input"], price_of("my-own-model")
    (0.15, None)
    """
    for table in (prices or {}, PRICES):
        if model in table:
            return table[model]
        low = {k.lower(): v for k, v in table.items()}
        if model.lower() in low:
            return low[model.lower()]
    return None


def cost_of(model: str, prices: dict, input_tokens: float, output_tokens: float) -> float | None:
    """Dollars for that many tokens of ``model`` (None: no known price, never 0)."""
    p = price_of(model, prices)
    return None if p is None else (input_tokens * p["input"] + output_tokens * p["output"]) / 1e6


def price_text(price: dict | None) -> str:
    """A price as the plan shows it, with its date and source.

    >>> price_text(PRICES["gpt-4o"])
    '$2.5/$10.0 per 1M tokens (2024-08-06; https://openai.com/api/pricing/)'
    """
    if price is None:
        return "unknown"
    return f"${price['input']}/${price['output']} per 1M tokens ({price.get('date') or 'no date'}; {price['source']})"
