"""The merged document's invariants as a pydantic model, for the tests: ``rexmle report`` writes
``rexmle-merged.json`` (schema ``rexmle-merged-report/1``, fields in :mod:`pytest_rexmle.report.merge`)
and never reads it back, so the package itself has no use for a model of it."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from pytest_rexmle.documents import Document


class MergedChallenge(BaseModel):
    model_config = ConfigDict(extra="allow")

    challenge_id: str
    n_runs: StrictInt = Field(ge=0)
    percentiles: list[Annotated[float, Field(ge=0.0, le=1.0)]]


class MergedAgent(BaseModel):
    model_config = ConfigDict(extra="allow")

    label: str
    n_runs: StrictInt = Field(ge=1)
    run_ids: list[str]
    scores: list[float]
    mean: float
    sem: float | None
    ci: tuple[float, float]
    rank: StrictInt
    challenges: list[MergedChallenge]

    @model_validator(mode="after")
    def _statistics_of_its_runs(self) -> "MergedAgent":
        n = self.n_runs
        if len(self.scores) != n or len(self.run_ids) != n:
            raise ValueError(f"agent {self.label!r} needs n_runs scores and run ids")
        if not math.isclose(self.mean, sum(self.scores) / n, abs_tol=1e-12):
            raise ValueError(f"agent {self.label!r} mean is not the mean of its run scores")
        if (self.sem is None) != (n < 2):
            raise ValueError(f"agent {self.label!r} sem must be null exactly for one run")
        if not 0.0 <= self.ci[0] <= self.ci[1] <= 1.0:
            raise ValueError(f"agent {self.label!r} interval must satisfy 0 <= lo <= hi <= 1")
        for row in self.challenges:
            if row.n_runs > n or len(row.percentiles) != row.n_runs:
                raise ValueError(f"{self.label}/{row.challenge_id} needs one percentile in [0, 1] per run that "
                                 "selected it")
        return self


class MergedReport(Document):
    """``rexmle-merged.json`` (``rexmle-merged-report/1``); see the module docstring for the fields."""

    schema_: Literal["rexmle-merged-report/1"] = Field(alias="schema")
    created: str
    challenges: list[str]
    partial: StrictBool
    bootstrap: dict
    sources: list
    agents: list[MergedAgent]
    note: str

    @model_validator(mode="after")
    def _one_row_per_challenge_and_ranked(self) -> "MergedReport":
        for agent in self.agents:
            if [c.challenge_id for c in agent.challenges] != self.challenges:
                raise ValueError(f"agent {agent.label!r} must have one row per merged challenge")
        for agent in self.agents:
            if agent.rank != 1 + sum(1 for other in self.agents if other.mean > agent.mean):
                raise ValueError("ranks must follow the mean scores (ties share a rank)")
        return self
