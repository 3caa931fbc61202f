"""Analysis: scaling curves (curves), one system or mode against another (comparison), how the metrics relate
(metrics), intervals, plots, the paper's claim checks and its reproduction (``fabnb reproduce``)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.analysis.<module>
