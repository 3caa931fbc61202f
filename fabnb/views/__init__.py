"""Views over the plain-Python models: the widgets, the results explorer and ``fabnb doctor``."""

__all__: list[str] = []  # its modules are imported by name: fabnb.views.<module>
