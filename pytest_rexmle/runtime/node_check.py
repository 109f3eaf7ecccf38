"""On a compute node: can this node run these image agents? Run by the Slurm runtime's probe job.

Prints one ``missing ...`` line per problem (bubblewrap or user namespaces, an image absent from the
node's view of the cache), the form the probe's reader already parses, and ``ok ...`` lines otherwise.
``python -m pytest_rexmle.runtime.node_check [--sandbox auto|bwrap|landlock] IMAGE...``
"""

from __future__ import annotations

import socket
import sys

from .local import refusal_here


def problems(images: list[str], sandbox: str = "auto") -> list[str]:
    """What this node lacks to run ``images`` (empty: nothing)."""
    host = socket.gethostname()
    return [f"on node {host}: {why}" for image in images if (why := refusal_here(image, sandbox))]


def main(argv: list[str]) -> int:
    sandbox = "auto"
    if argv[:1] == ["--sandbox"]:
        sandbox, argv = argv[1], argv[2:]
    found = problems(argv, sandbox)
    for line in found:
        print(f"missing {line}")
    if not found:
        print(f"ok {socket.gethostname()} runs {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
