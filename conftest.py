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

# too_slow and the per-example deadline measure the machine, not the code (a config fuzz example
# took 257 ms against hypothesis's 200 ms with two suites on two cores): a loaded host must not
# fail a property test. Speed is the benchmarks' business (bench/), never a test's.
settings.register_profile("bridge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", parent=settings.get_profile("bridge"), derandomize=True, print_blob=True
)
settings.load_profile("bridge")
if os.environ.get("CI", "") not in ("", "0", "false"):
    settings.load_profile("ci")
