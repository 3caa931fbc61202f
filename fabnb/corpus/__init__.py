"""The corpus layer: the weighted knowledge base (terms), passages, loading and chunking (collection),
vectors and the three context-synthesis strategies (FAB-Bench Sections 3.1-3.3)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.corpus.<module>
