"""The session's gateway: the agent's only network peer (model APIs with the keys kept on the host,
metered usage and budgets, the trajectory of every model call, egress by policy, and validation).

Public interface (runtimes code against it)::

    from pytest_rexmle.gateway import session_gateway, Budget
    gw = session_gateway(settings)
    run = gw.open_run(run_id, logs_dir=..., submission_dir=..., task_id=..., budget=None,
                      egress_allow=(), egress_deny=(), public_dir=None)
    run.token; run.environment("http://HOST:PORT"); run.serve(listener); run.host_address()
    record = run.close()   # {"usage", "egress", "budget_exhausted", "calls", "budget", "errors", "provider_tools"[, "budget_spent"]}

A runtime puts ``record`` into ``RunOutcome.details["gateway"]``; :func:`pytest_rexmle.run.launch.finish` writes
its ``usage``, ``egress`` and ``budget_exhausted`` into run.json (see :mod:`.record`).

Names resolve lazily, so importing :mod:`.record` (as run/launch.py does) costs no server, socket or TLS import.
"""

from __future__ import annotations

__all__ = ["Budget", "BudgetError", "Gateway", "GatewayRun", "Limits", "session_gateway"]


def __getattr__(name: str):
    from importlib import import_module  # start-up: importlib only where this runs

    if name in ("Budget", "BudgetError"):
        return getattr(import_module(".budget", __name__), name)
    if name in __all__:  # the others live in .server
        return getattr(import_module(".server", __name__), name)
    raise AttributeError(name)
