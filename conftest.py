"""Repository-level pytest configuration.

Kept free of hooks on purpose: with an editable install this file sits above the plugin's benchmark
module, so pytest loads it in users' benchmark sessions too. The project's test setup lives in
``tests/conftest.py`` and ``pyproject.toml``.
"""

collect_ignore = ["benchmarks", "fixtures"]
