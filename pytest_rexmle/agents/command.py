"""The ``command`` agent: any program of the user's, started under the contract.

``--agent=command --agent-option cmd="python my_agent.py" --agent-option dir=path/to/agent`` copies the
folder into the run workspace (so the agent can modify its own copy and nothing of the original is
exposed) and runs the command there with ``/bin/sh -c``.

Its software stack comes with it in one of two ways (bringing one's own agent is the benchmark's main use,
and the sandbox's system Python has no numpy, PyTorch or LLM SDK):

* ``env=PATH``: a host virtual environment or conda prefix, shown read-only at its own path (with the
  interpreter a venv's ``bin/python`` links to) and first on ``PATH`` after the harness's tools, so
  ``python`` is the environment's; ``VIRTUAL_ENV`` or ``CONDA_PREFIX`` says which (:mod:`.software`).
* ``image=NAME``: the command runs in that Docker image (e.g. ``rexmle/base``, the CUDA PyTorch, MONAI and
  nnU-Net stack the paper's agents get) through the docker runtime, which the session then chooses.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import RexmleError
from .base import Agent, AgentContext
from .software import Software, software_of


class CommandAgent(Agent):
    known_options = ("cmd", "dir", "env", "image")
    required_options = ("cmd",)

    def __init__(self, name: str, options: dict[str, str]) -> None:
        super().__init__(name, options)
        if options.get("env") and options.get("image"):
            raise RexmleError(f"agent {name!r}: env= (a host environment) and image= (a Docker image) are two "
                              "ways to bring a software stack; give one")
        self.stack: Software | None = software_of(options["env"]) if options.get("env") else None
        if self.stack is not None:
            self.supported_isolation = ("local",)  # a host folder: the local sandbox (or a Slurm node's) shows it
        if options.get("image"):
            self.image = options["image"]
            self.supported_isolation = ("docker",)  # the command's stack is the image's

    @classmethod
    def option_problems(cls, name: str, options: dict[str, str]) -> list[str]:
        """``dir=`` must be a folder now: the run copies it into the workspace, and a wrong path found there
        was a harness ERROR with a traceback per item."""
        source = options.get("dir")
        if not source:
            return []
        src = Path(source).expanduser().resolve()
        if not src.exists():
            return [f"agent {name!r}: option dir={source!r} does not exist ({src}); give the folder that holds "
                    "your agent's code (it is copied into each run's workspace)"]
        if not src.is_dir():
            return [f"agent {name!r}: option dir={source!r} is not a folder ({src}); give the folder that "
                    "holds the file, e.g. dir=" + str(src.parent)]
        return []

    def setup(self, ctx: AgentContext) -> Path | None:
        source = self.options.get("dir")
        if not source:
            return None
        src = Path(source).expanduser().resolve()
        if not src.is_dir():
            raise RexmleError(f"agent option dir={source!r} is not a folder")
        dest = ctx.workspace / "agent"
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        return dest

    def command(self, ctx: AgentContext) -> list[str]:
        return ["/bin/sh", "-c", self.options["cmd"]]

    def environment(self, ctx: AgentContext) -> dict[str, str]:
        return dict(self.stack.variables) if self.stack is not None else {}

    def software(self) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        return (self.stack.roots, self.stack.path) if self.stack is not None else ((), ())
