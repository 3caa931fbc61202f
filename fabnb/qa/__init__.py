"""QA pairs: adaptive generation, RAG-TESTER's test cases, documents, expert access and rating, curation."""

__all__: list[str] = []  # its modules are imported by name: fabnb.qa.<module>
