"""LLMs: any OpenAI-compatible endpoint (llm) and the embedded model and its server (local)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.models.<module>
