"""Deliberately weakened runtimes: each breaks one promise of the runtime contract, so the conformance
suite must name exactly the checks that promise covers (registered under test names by the tests, through
an entry point, as a third party would register them)."""

from __future__ import annotations

import dataclasses

from pytest_rexmle.limits import Limits
from pytest_rexmle.runtime.base import RunOutcome, RunSpec
from pytest_rexmle.runtime.local import LocalRuntime
from pytest_rexmle.runtime.policy import SandboxPolicy


class AnswersBoundRuntime(LocalRuntime):
    """Binds the task's whole folder as the data, private answers included, and forgets the hidden paths."""

    name = "weak-answers"

    def run(self, spec: RunSpec) -> RunOutcome:
        return super().run(dataclasses.replace(spec, data_dir=spec.data_dir.parent, hidden=()))


class HostNetworkRuntime(LocalRuntime):
    """Gives the agent the host's network where the gateway's was asked for (no gateway: the keys go in as given)."""

    name = "weak-network"

    def run(self, spec: RunSpec) -> RunOutcome:
        return super().run(dataclasses.replace(spec, network="host") if spec.network == "gateway" else spec)


class UnlimitedRuntime(LocalRuntime):
    """Drops every resource limit of the run's policy."""

    name = "weak-limits"

    def policy(self, spec: RunSpec) -> SandboxPolicy:
        unlimited = Limits(memory=None, processes=None, file_size=None, disk=None, tmp=None)
        return dataclasses.replace(super().policy(spec), limits=unlimited)


class AllGpusRuntime(LocalRuntime):
    """Shows a GPU run every GPU of the machine (as bubblewrap's binding of every ``/dev/nvidia*`` did), while its
    ``CUDA_VISIBLE_DEVICES`` still names its own."""

    name = "weak-gpus"

    def policy(self, spec: RunSpec) -> SandboxPolicy:
        policy = super().policy(spec)
        return dataclasses.replace(policy, gpus=tuple(str(i) for i in range(8))) if policy.gpus else policy


class NoSandboxRuntime(LocalRuntime):
    """The local runtime with no sandbox at all (what --rexmle-unsafe-local gives): every promise broken."""

    name = "weak-nothing"

    def __init__(self, **options: object) -> None:
        super().__init__(**{**options, "unsafe": True})


class UndroppedImageRuntime(LocalRuntime):
    """Starts an image run's bubblewrap as the harness, trusting the image's own ``python3`` (the launcher)
    to drop privileges and set the limits: the local runtime before issue #38's drop before exec."""

    name = "weak-interpreter"

    @staticmethod
    def _host_drop(config, who, image):
        return None
