"""fabnb.cli: the ``fabnb`` command's entry point (its commands are tested with their stages)."""

import gc

import fabnb.cli


def test_the_command_returns_mains_code_and_leaves_its_objects_to_the_exit(monkeypatch):
    """``console`` freezes what is alive, so the interpreter's exit skips collecting it (1-2 s with DeepEval)."""
    monkeypatch.setattr(fabnb.cli, "main", lambda argv=None: 3)
    gc.unfreeze()
    try:
        assert fabnb.cli.console() == 3
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process goes on
