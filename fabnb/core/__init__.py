"""Foundations: errors, exit statuses, the shared schema, paths and the one file reader, text and tokens,
statistics, crash-safe stores, child processes, Voilà pages and score frames. Nothing here imports a layer above."""

__all__: list[str] = []  # its modules are imported by name: fabnb.core.<module>
