"""What the agent-adapter tests share, with or without Docker: an image's start script imported as the
image runs it, and an agent's view of a run laid out in a temporary folder."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from pytest_rexmle.agents.base import AgentContext
from pytest_rexmle.task import registry

from .conftest import REPO

#: one folder per agent (adapter, image recipe, start script), and ``common/`` beside them
IMAGES = REPO / "pytest_rexmle" / "agents"
#: a provider key no real provider issues; tests assert it never leaks into a run's files or logs
KEY = "sk-fake-0123456789abcdef"


def start_module(agent: str):
    """pytest_rexmle/agents/<agent>/start.py imported as the image runs it (the shared helpers beside it)."""
    sys.path.insert(0, str(IMAGES / "common"))
    try:
        spec = importlib.util.spec_from_file_location(f"start_{agent.replace('-', '_')}", IMAGES / agent.replace("-", "_") / "start.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(IMAGES / "common"))


def common_module(name: str):
    """A start scripts' helper (pytest_rexmle/agents/common/<name>.py) imported as the images have it."""
    sys.path.insert(0, str(IMAGES / "common"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(IMAGES / "common"))


def agent_context(tmp_path: Path) -> AgentContext:
    """An ldct-iqa run's folders under ``tmp_path`` as the adapter sees them (an hour's budget)."""
    run = tmp_path / "run"
    for sub in ("workspace", "submission", "logs"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    return AgentContext(registry().get("ldct-iqa"), run, run / "workspace", run / "submission", run / "logs",
                        tmp_path / "public", 3600.0)
