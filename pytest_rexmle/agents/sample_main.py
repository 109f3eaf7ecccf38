"""Entry point the sample agent runs inside its sandbox: ``python -m pytest_rexmle.agents.sample_main``."""

from .sample import main

raise SystemExit(main())
