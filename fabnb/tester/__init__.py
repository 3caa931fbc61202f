"""RAG-TESTER: its study end to end (tests per document, a grid of systems, oracle verdicts, tables)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.tester.<module>
