"""Hypothesis profiles for the fuzz tests.

``make test`` runs the ``ci`` profile: a bounded number of examples per test, so the
whole fuzz suite takes seconds. To fuzz for real::

    NSQ_FUZZ_PROFILE=long .venv/bin/pytest tests/fuzz --hypothesis-show-statistics
    NSQ_FUZZ_PROFILE=long NSQ_FUZZ_EXAMPLES=200000 .venv/bin/pytest tests/fuzz

``long`` runs ``NSQ_FUZZ_EXAMPLES`` examples per test (default 20,000) with no time
limit per example. Failures are replayed first on the next run (hypothesis keeps them in
``.hypothesis/``); ``--hypothesis-seed=N`` reproduces a run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_MACHINE = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("NSQ_FUZZ_EXAMPLES", "300")),
    deadline=None,  # shared CI machines: a slow example is not a bug
    suppress_health_check=_SLOW_MACHINE,
    print_blob=True,
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("NSQ_FUZZ_EXAMPLES", "20000")),
    deadline=None,
    suppress_health_check=_SLOW_MACHINE,
    print_blob=True,
)
settings.load_profile(os.environ.get("NSQ_FUZZ_PROFILE", "ci"))
