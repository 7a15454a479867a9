"""Repository-wide pytest configuration: hypothesis profiles sized for a 2-core machine.

``ci`` (the default) keeps property tests fast; ``nightly`` is for scheduled runs
(``HYPOTHESIS_PROFILE=nightly pytest``).
"""

import os

from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]  # the plugin's own tests (suites/harness) run downstream suites with it

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "nightly", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
