"""A pytest plugin that makes every public function of the modules under the property tests refuse its input.

``tests/test_properties.py::test_the_suite_fails_when_every_function_refuses`` loads it
(``-p refuse_everything``) to check that the property tests can fail: a test that still
passes when every function refuses checks nothing of its own.
"""

import importlib
import inspect

#: The modules whose functions the property tests call.
MODULES = ("fabnb.analysis.curves", "fabnb.analysis.comparison", "fabnb.analysis.metrics",
           "fabnb.analysis.intervals", "fabnb.analysis.plots", "fabnb.core.stats",
           "fabnb.judge", "fabnb.judge.oracle",
           "fabnb.judge.sanity", "fabnb.qa.rating",
           "fabnb.tester.study", "fabnb.qa.generation")


def _refuser(name: str):
    def refuse(*args, **kwargs):
        raise ValueError(f"{name} refuses every input (tests/refuse_everything.py)")

    return refuse


def pytest_configure(config):
    from hypothesis import Phase, settings

    # Every example fails at once here: no shrinking (it would try example after failing example), no database.
    settings.register_profile("refuse-everything", phases=[Phase.explicit, Phase.generate], database=None)
    settings.load_profile("refuse-everything")
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            if inspect.isfunction(getattr(module, name, None)):
                setattr(module, name, _refuser(name))
