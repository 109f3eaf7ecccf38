"""Fixtures: the fake Zenodo/figshare server with every competition's fake release."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import releases
from .fake_server import FakeServer, RunningServer

#: Zenodo record ids and the figshare article the fake releases stand in for
RECORDS = {"7833096": "ldct", "15192302": "panther", "7812323": "dentex", "15692630": "topcow",
           "14869398": "puma", "7960856": "isles", "10719375": "cellseg", "16878417": "topbrain"}
SEGA_ARTICLE = ("14806362", 1)


def build_state() -> tuple[FakeServer, dict[str, Path | bytes]]:
    ldct_zenodo, ldct_manual = releases.ldct()
    state = FakeServer()
    state.zenodo = {"7833096": ldct_zenodo, "15192302": releases.panther(), "7812323": releases.dentex(),
                    "15692630": releases.topcow(), "14869398": releases.puma(), "7960856": releases.isles(),
                    "10719375": releases.cellseg(), "16878417": releases.topbrain()}
    state.figshare = {SEGA_ARTICLE: releases.sega()}
    manual = {"train_dataset.zip": releases.usenhance()["train_dataset.zip"], **ldct_manual}
    return state, manual


@pytest.fixture(scope="session")
def release_bundle(tmp_path_factory):
    """(server state template, manual archives on disk) built once per session."""
    state, manual = build_state()
    folder = tmp_path_factory.mktemp("manual")
    paths = {}
    for name, data in manual.items():
        (folder / name).write_bytes(data)
        paths[name] = folder / name
    return state, paths


@pytest.fixture
def fake_sources(release_bundle, monkeypatch):
    """A fresh server (own log and faults) serving the session's fake releases; env points at it."""
    template, manual = release_bundle
    state = FakeServer(zenodo=template.zenodo, figshare=template.figshare)
    server = RunningServer(state)
    monkeypatch.setenv("REXMLE_ZENODO_URL", state.url)
    monkeypatch.setenv("REXMLE_FIGSHARE_URL", state.url)
    monkeypatch.setenv("REXMLE_DOWNLOAD_BACKOFF", "0")
    yield state, manual
    server.close()
