"""What calls cost: the price table as data (each price with its date and source), and the arithmetic.

Prices are dollars per million ``input`` (prompt) and ``output`` (completion) tokens,
the vocabulary of the experiment file's ``[prices]`` table and of :class:`fabnb.models.llm.LLM`;
``batch_input`` and ``batch_output`` are the vendor's batch price, where it has one (OpenAI's Batch API: half).

Examples
--------
>>> cost_of("gpt-4o-mini", {}, input_tokens=1_000_000, output_tokens=0)
0.15
>>> cost_of("my-own-model", {}, 10, 10) is None
True
"""

from __future__ import annotations

__all__ = ["PRICES", "batch_cost", "batch_price_of", "cost_of", "price_of", "price_text"]

#: Dollars per million input and output tokens, with the date the vendor's price took effect and where it
#: is published; a batch price where the vendor has a batch API (OpenAI's: half, on the same page). Prices
#: change: override or add models under ``[prices]`` in the experiment file.
PRICES: dict[str, dict] = {
    "gpt-4o": {"input": 2.50, "output": 10.00, "batch_input": 1.25, "batch_output": 5.00,
               "date": "2024-08-06", "source": "https://openai.com/api/pricing/"},
    "gpt-4o-mini": {"input": 0.15, "output": 0.60, "batch_input": 0.075, "batch_output": 0.30,
                    "date": "2024-07-18", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1": {"input": 2.00, "output": 8.00, "batch_input": 1.00, "batch_output": 4.00,
                "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60, "batch_input": 0.20, "batch_output": 0.80,
                     "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40, "batch_input": 0.05, "batch_output": 0.20,
                     "date": "2025-04-14", "source": "https://openai.com/api/pricing/"},
    "deepseek-chat": {"input": 0.28, "output": 0.42, "date": "2025-09-29",
                      "source": "https://api-docs.deepseek.com/quick_start/pricing (V3.2-Exp, cache miss)"},
    "gemini-2.5-flash": {"input": 0.30, "output": 2.50, "date": "2025-06-17",
                         "source": "https://ai.google.dev/gemini-api/docs/pricing (text input)"},
    "embedded": {"input": 0.0, "output": 0.0, "batch_input": 0.0, "batch_output": 0.0, "date": "",
                 "source": "the embedded local model: no charge"},
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


def cost_of(model: str, prices: dict, input_tokens: float, output_tokens: float, batch: bool = False) -> float | None:
    """Dollars for that many tokens of ``model`` at its price, or with ``batch`` at its batch price
    (:func:`batch_price_of`); None: no known price, never 0."""
    p = batch_price_of(model, prices) if batch else price_of(model, prices)
    return None if p is None else (input_tokens * p["input"] + output_tokens * p["output"]) / 1e6


def price_text(price: dict | None) -> str:
    """A price as the plan shows it, with its date and source.

    >>> price_text(PRICES["gpt-4o"])
    '$2.5/$10.0 per 1M tokens (2024-08-06; https://openai.com/api/pricing/)'
    """
    if price is None:
        return "unknown"
    return f"${price['input']}/${price['output']} per 1M tokens ({price.get('date') or 'no date'}; {price['source']})"


def batch_price_of(model: str, prices: dict | None = None) -> dict | None:
    """The batch price of a model (``{"input", "output"}``, dollars per million tokens), from its price record's
    ``batch_input`` and ``batch_output``; None when no batch price is known.

    >>> batch_price_of("gpt-4.1-mini"), batch_price_of("deepseek-chat")
    ({'input': 0.2, 'output': 0.8}, None)
    """
    p = price_of(model, prices)
    if p is None or "batch_input" not in p:
        return None
    return {"input": p["batch_input"], "output": p["batch_output"]}


def batch_cost(model: str, prices: dict | None, requests) -> float | None:
    """The largest cost of batch requests at the batch price: every prompt token (counted over the messages) and
    each request's ``max_tokens`` of completion (None: no batch price, or a request without ``max_tokens``).

    >>> body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 100}
    >>> round(batch_cost("gpt-4.1-mini", {}, [("k", body)]) * 1e6)  # 100 x $0.80 + 7 x $0.20 per 1M tokens
    81
    """
    from ..core.tokens import count_tokens

    if batch_price_of(model, prices) is None:
        return None  # before counting any token
    prompt = completion = 0
    for _, body in requests:
        if not body.get("max_tokens"):
            return None
        prompt += sum(count_tokens(str(m.get("content", ""))) + 4 for m in body.get("messages", []))
        completion += body["max_tokens"]
    return cost_of(model, prices, prompt, completion, batch=True)
