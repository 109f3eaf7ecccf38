"""Session reports: terminal table, ``rexmle-report.json`` and ``rexmle-report.md``."""
