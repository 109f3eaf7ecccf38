"""Print the workspace of the experiment R&D-Agent chose to submit (run with R&D-Agent's own Python).

``python rdagent_sota.py LOG_TRACE_PATH``: reads the loop's pickled log records with R&D-Agent's own
reader (``rdagent.log.storage.FileStorage``) and prints the ``experiment_workspace.workspace_path`` of the
last ``sota_exp_to_submit`` record (what R&D-Agent's own selector would submit), else of the last
``SOTA experiment`` record. Exit status 1 when there is none. Kept apart from start.py because
R&D-Agent lives in its own virtual environment, not in the image's Python.
"""

from __future__ import annotations

import sys
from pathlib import Path


def workspace_of(log_path: Path) -> Path | None:
    from rdagent.log.storage import FileStorage  # start-up: rdagent only where this runs

    chosen: dict[str, object] = {}
    for msg in FileStorage(log_path).iter_msg():
        tag = str(getattr(msg, "tag", ""))
        for key in ("sota_exp_to_submit", "SOTA experiment"):
            if tag.endswith(key) and getattr(msg, "content", None) is not None:
                chosen[key] = msg.content
    for key in ("sota_exp_to_submit", "SOTA experiment"):
        exp = chosen.get(key)
        path = getattr(getattr(exp, "experiment_workspace", None), "workspace_path", None)
        if path:
            return Path(path)
    return None


if __name__ == "__main__":
    found = workspace_of(Path(sys.argv[1]))
    if found is None:
        raise SystemExit(1)
    print(found)
