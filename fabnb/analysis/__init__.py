"""Analysis: scaling curves and correlations (curves), intervals, plots, the paper's claim checks and its
reproduction (``fabnb reproduce``)."""

__all__: list[str] = []  # its modules are imported by name: fabnb.analysis.<module>
