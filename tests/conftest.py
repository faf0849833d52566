"""Suite-wide settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs a fixed, reproducible set of examples (a red CI must be reproducible); local runs explore.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
