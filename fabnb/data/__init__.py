"""Data: the FAB-Bench release, downloaded and verified (datasets), and the paper's published tables (published)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.data.<module>
