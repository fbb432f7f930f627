"""Sets a variable when imported, as vLLM's modules do (see tests/warm_echo.py)."""

import os

os.environ.setdefault("WARM_ECHO_DEP", "imported")
