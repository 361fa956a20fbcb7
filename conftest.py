"""Suite-wide settings.

Under CI (``CI`` set, as ``.ci/run`` runs) hypothesis draws the same examples on every run:
a property test that finds a new counterexample fails a developer's run, where it can be
looked at, not a landing that another change's author cannot reproduce. Developers' runs keep
drawing fresh examples each time (the grapheme property test's lone-surrogate counterexample was
found that way).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# too_slow measures the machine, not the code: a loaded CI host must not fail a property test.
settings.register_profile(
    "ci", derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
if os.environ.get("CI", "") not in ("", "0", "false"):
    settings.load_profile("ci")
