"""``rexmle images import`` bounded by construction, and image names that cannot hijack each other (issue #38,
items 3 and 4). Each test builds a small hostile archive with ``tarfile`` and checks it is refused cleanly (an
``ImageRejected`` naming why, nothing left in the cache) or neutralised, where the importer before this
change created tens of thousands of inodes under 1-byte caps, read a sparse config whole, hashed a gigabyte
tail, crashed in clean-up or on a malformed manifest, or let an archive take over another image's tag."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

from pytest_rexmle.cli import main as rexmle
from pytest_rexmle.errors import RexmleError
from pytest_rexmle.images import store
from pytest_rexmle.images.cli import open_partial
from pytest_rexmle.images.unpack import MAX_DEPTH, ImageRejected

from .craft import Entry, config_for, docker_archive, file, folder, layer_tar, named, oci_layout, sparse_info, tar_of

ESC = "\x1b]0;owned\x07\x1b[2J"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    # a tree deeper than the recursion limit, left by a failing test, would break pytest's own clean-up of
    # old temporary folders in a later session (its rm_rf recurses): removed here without recursion
    from pytest_rexmle.images.unpack import remove_tree

    remove_tree(tmp_path)


def nothing_stored(cache: Path) -> bool:
    images = cache / "images"
    return not images.exists() or not any(images.iterdir())


def raw_archive(path: Path, layers: list[bytes], plain: list[bytes] | None = None, tags: list[str] = (),
                config: bytes | None = None) -> Path:
    """A docker-archive of already-made layer members (``plain``: their uncompressed tars, for the diff ids)."""
    config = config or config_for(plain if plain is not None else layers)
    names = [f"{i:03d}/layer.tar" for i in range(len(layers))]
    manifest = [{"Config": "c.json", "RepoTags": list(tags), "Layers": names}]
    return tar_of(path, [*(named(n, data) for n, data in zip(names, layers, strict=True)), named("c.json", config),
                         named("manifest.json", json.dumps(manifest).encode())])


# -- item 3: names ---------------------------------------------------------------------------------------


def test_a_tag_spelling_another_images_digest_is_refused_and_digests_match_first(tmp_path, cache):
    first, _ = store.import_archive(docker_archive(tmp_path / "a.tar", [[file("a")]]), tags=("lab/a:1",))
    with pytest.raises(ImageRejected, match="spelled as a digest"):
        store.import_archive(docker_archive(tmp_path / "b.tar", [[file("b")]]), tags=(first.digest,))
    with pytest.raises(ImageRejected, match="spelled as a digest"):  # nor when the archive names itself so
        store.import_archive(docker_archive(tmp_path / "c.tar", [[file("c")]], tags=(first.digest,)), adopt_tags=True)
    assert store.find(first.digest).folder == first.folder
    for spelled in (first.digest[:19], first.digest.split(":")[1], first.digest.upper().replace("SHA", "sha")):
        with pytest.raises(ImageRejected, match="spelled as a digest"):
            store.check_tag(spelled)
    assert store.check_tag("agent:" + "0123456789abcdef" * 2 + "01234567") == "agent:" + "0123456789abcdef" * 2 + "01234567"
    # a cache written before this change may hold such a tag on a newer image: the digest still wins
    second, _ = store.import_archive(docker_archive(tmp_path / "d.tar", [[file("d")]]), tags=("lab/d:1",))
    manifest = json.loads((second.folder / "image.json").read_text())
    manifest.update(tags=[first.digest, "lab/d:1"], imported=time.time() + 60)
    (second.folder / "image.json").write_text(json.dumps(manifest))
    assert store.find(first.digest).folder == first.folder
    assert store.find("sha256:" + "0" * 64) is None


def test_an_archives_own_tags_are_adopted_only_when_asked(tmp_path):
    real, _ = store.import_archive(docker_archive(tmp_path / "real.tar", [[file("real")]]),
                                   tags=("rexmle/aide:latest",))
    hostile = docker_archive(tmp_path / "evil.tar", [[file("evil")]], tags=("rexmle/aide:latest",))
    image, _ = store.import_archive(hostile)
    assert image.tags == [] and image.manifest["archive_tags"] == ["rexmle/aide:latest"]
    assert store.find("rexmle/aide:latest").digest == real.digest  # not taken over
    assert store.find(image.digest).folder == image.folder  # usable by its digest
    adopted, _ = store.import_archive(hostile, adopt_tags=True)
    assert adopted.tags == ["rexmle/aide:latest"] and store.find("rexmle/aide:latest").digest == image.digest


def test_names_with_control_characters_are_refused_as_tags_and_printed_escaped(tmp_path, capsys, cache):
    archive = docker_archive(tmp_path / "esc.tar", [[file("x")]], tags=(f"evil{ESC}:1",))
    assert rexmle(["images", "import", "--adopt-tags", str(archive)]) == 1
    err = capsys.readouterr().err
    assert "control characters" in err and "\x1b" not in err and "\\x1b" in err
    assert rexmle(["images", "import", str(archive)]) == 0  # untagged: the archive's name only shown, escaped
    out = capsys.readouterr().out
    assert "untagged" in out and "\x1b" not in out and "\\x1b]0;owned\\x07" in out
    image = store.stored()[0]  # a tag with escapes in an older cache's manifest: listed escaped
    manifest = json.loads((image.folder / "image.json").read_text())
    (image.folder / "image.json").write_text(json.dumps({**manifest, "tags": [f"old{ESC}"]}))
    assert rexmle(["images", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "old\\x1b]0;owned" in out


# -- item 4: every entry charged -------------------------------------------------------------------------


def test_empty_entries_are_charged_so_one_byte_caps_refuse_a_tiny_archive(tmp_path, cache):
    """3,000 empty files gzip to a few KiB: before, 1-byte caps let every one of them become an inode."""
    plain = layer_tar([folder("d"), *(file(f"d/{i}", b"") for i in range(3000))])
    archive = raw_archive(tmp_path / "inodes.tar", [gzip.compress(plain)], [plain])
    assert archive.stat().st_size < 100_000
    with pytest.raises(ImageRejected, match=r"entry 'd' takes \d+ bytes, past the per-layer cap of 1 bytes"):
        store.import_archive(archive, max_layer=1, max_total=1)
    assert nothing_stored(cache)
    with pytest.raises(ImageRejected, match=r"entry 'd/99' is past the image's cap of 100 entries"):
        store.import_archive(archive, limits=store.Limits(max_entries=100))
    image, report = store.import_archive(archive)
    assert report.entries == 3001 and report.bytes_written >= 3001 * 512  # each entry's header is counted


def test_a_sparse_config_is_refused_without_reading_it(tmp_path, cache):
    archive = tar_of(tmp_path / "sparse.tar", [(sparse_info("c.json", 0, 300_000_000), b""),
                                               named("manifest.json", b'[{"Config": "c.json", "Layers": []}]')])
    assert archive.stat().st_size < 20_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ImageRejected, match="member 'c.json' is a sparse file"):
        store.import_archive(archive)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: not 300 MB read


def test_a_config_over_the_document_cap_is_refused(tmp_path):
    big = b'{"pad": "' + b"x" * (16 << 20) + b'"}'
    archive = tar_of(tmp_path / "big.tar", [named("c.json", big),
                                            named("manifest.json", b'[{"Config": "c.json", "Layers": []}]')])
    with pytest.raises(ImageRejected, match="c.json is larger than 16777216 bytes"):
        store.import_archive(archive)


def test_a_tail_after_the_layers_end_is_metered(tmp_path, cache):
    """The zeros after a tar's end are part of the diff id, so they are hashed: 64 MiB gzip to 64 KiB."""
    plain = layer_tar([file("x")]) + bytes(64 << 20)
    archive = raw_archive(tmp_path / "tail.tar", [gzip.compress(plain)], [plain])
    assert archive.stat().st_size < 200_000
    with pytest.raises(ImageRejected, match="neither an entry nor a file's contents"):
        store.import_archive(archive)
    assert nothing_stored(cache)
    sparse_tail = layer_tar([file("x")])  # the same tail as a sparse member of the outer archive
    archive = tar_of(tmp_path / "sparse-tail.tar", [(sparse_info("l.tar", len(sparse_tail), 4 << 30), sparse_tail),
                                                    named("c.json", config_for([sparse_tail])),
                                                    named("manifest.json", b'[{"Config": "c.json", "Layers": ["l.tar"]}]')])
    started = time.monotonic()
    with pytest.raises(ImageRejected, match="member 'l.tar' is a sparse file"):
        store.import_archive(archive)
    assert time.monotonic() - started < 5  # before: 4 GiB hashed


def test_an_oversized_pax_header_is_not_read_whole(tmp_path, cache):
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("x")
        info.pax_headers = {"comment": "z" * (12 << 20)}
        tar.addfile(info)
    plain = out.getvalue()
    with pytest.raises(ImageRejected, match="neither an entry nor a file's contents"):
        store.import_archive(raw_archive(tmp_path / "pax.tar", [gzip.compress(plain)], [plain]))
    assert nothing_stored(cache)


def test_a_malformed_sparse_map_is_a_refusal(tmp_path):
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("x")
        info.pax_headers = {"GNU.sparse.map": "zero,one"}
        tar.addfile(info)
    with pytest.raises(ImageRejected, match="not a readable tar layer"):
        store.import_archive(raw_archive(tmp_path / "map.tar", [out.getvalue()]))


def test_a_sparse_layer_member_is_charged_its_logical_size_and_written_with_its_holes(tmp_path):
    data = b"head" * 1024
    member = layer_tar_of([(sparse_info("big", len(data), 64 << 20), data)])
    image, report = store.import_archive(raw_archive(tmp_path / "sparse.tar", [member]))
    written = image.rootfs / "big"
    assert written.stat().st_size == 64 << 20 and written.read_bytes()[:len(data)] == data
    assert written.stat().st_blocks * 512 <= 2 << 20  # the chunk holding the data; before: all 64 MiB on disk
    assert report.bytes_written >= 64 << 20
    other = layer_tar_of([(sparse_info("big", len(data), 64 << 20), data.upper())])  # not the image stored above
    with pytest.raises(ImageRejected, match=r"'big' declares 67108864 bytes, past the per-layer cap"):
        store.import_archive(raw_archive(tmp_path / "sparse2.tar", [other]), max_layer=32 << 20)


def layer_tar_of(members: list) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_tree_deeper_than_the_cap_is_refused_and_cleaned_up(tmp_path, cache):
    """1,100 nested folders (deeper than Python's recursion limit) then an escaping entry: before, the
    clean-up itself crashed (RecursionError) and left the staging folder for ever."""
    chain = [folder("/".join(["a"] * depth)) for depth in range(1, 1101)]
    archive = docker_archive(tmp_path / "deep.tar", [[*chain, file("../escape")]])
    with pytest.raises(ImageRejected, match=f"folders deep, more than {MAX_DEPTH}"):
        store.import_archive(archive)
    assert nothing_stored(cache)


def test_stale_staging_folders_are_swept_and_live_ones_kept(tmp_path, cache):
    home = cache / "images"
    home.mkdir(parents=True)
    stale, live, undated = (home / f".import-{int(time.time()) - 10}-dead", home / f".import-{int(time.time()) + 3600}-live",
                            home / ".import-oldformat")
    deep = stale
    stale.mkdir()
    for _ in range(1100):  # deeper than the recursion limit (os.makedirs itself recurses: one by one)
        deep = deep / "d"
        deep.mkdir()
    for path in (live, undated):
        path.mkdir()
    os.chmod(stale / "d", 0o500)  # read-only, as an image's folders can be
    os.utime(undated, (time.time() - 2 * 86400,) * 2)
    store.import_archive(docker_archive(tmp_path / "ok.tar", [[file("x")]]))
    left = sorted(p.name for p in home.iterdir() if p.name.startswith(".import-"))
    assert left == [live.name]
    assert sys.getrecursionlimit() < 1100


@pytest.mark.parametrize("manifest, config", [
    ([{"Layers": []}], None),  # no Config
    ([{"Config": "c.json", "Layers": 5}], None),  # Layers not a list
    ([{"Config": "c.json", "Layers": [], "RepoTags": "x"}], None),
    ([{"Config": "c.json", "Layers": []}], b"[]"),  # the config is not an object
    ([{"Config": "c.json", "Layers": []}], b'{"config": {"Env": 5}, "rootfs": {"diff_ids": []}}'),
    ([{"Config": "c.json", "Layers": []}], b'{"rootfs": "layers"}'),
    ([{"Config": "c.json", "Layers": []}], b'{"config": {"Cmd": [1]}, "rootfs": {"diff_ids": []}}'),
])
def test_malformed_docker_manifests_and_configs_are_clean_refusals(tmp_path, capsys, manifest, config):
    archive = tar_of(tmp_path / "bad.tar", [named("c.json", config or config_for([])),
                                            named("manifest.json", json.dumps(manifest).encode())])
    with pytest.raises(ImageRejected):
        store.import_archive(archive)
    assert rexmle(["images", "import", str(archive)]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "Traceback" not in err


def test_an_archive_of_too_many_members_is_refused_while_listing(tmp_path):
    import tarfile

    from pytest_rexmle.images.archive import MAX_MEMBERS

    path = tmp_path / "many.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for number in range(MAX_MEMBERS + 1):
            tar.addfile(tarfile.TarInfo(f"{number}"))
    with pytest.raises(ImageRejected, match=f"more than {MAX_MEMBERS} members"):
        store.import_archive(path)


@pytest.mark.parametrize("which", ["manifest.json", "c.json"])
def test_a_document_nested_past_the_parsers_recursion_is_a_refusal(tmp_path, which):
    deep = b"[" * 200_000 + b"]" * 200_000
    documents = {"c.json": config_for([]), "manifest.json": b'[{"Config": "c.json", "Layers": []}]', which: deep}
    archive = tar_of(tmp_path / "deep.tar", [named(name, data) for name, data in documents.items()])
    with pytest.raises(ImageRejected, match="nests deeper than any image document"):
        store.import_archive(archive)


@pytest.mark.parametrize("break_it", ["index-entry", "annotations", "manifest-layers", "manifest-config",
                                      "platforms"])
def test_malformed_oci_documents_are_clean_refusals(tmp_path, break_it):
    layout = oci_layout(tmp_path / "oci", [[file("x")]])
    index = json.loads((layout / "index.json").read_text())
    blob = layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(blob.read_text())
    if break_it == "index-entry":
        index["manifests"] = ["x"]
    elif break_it == "annotations":
        index["manifests"][0]["annotations"] = ["x"]
    elif break_it == "manifest-layers":
        manifest["layers"] = [5]
    elif break_it == "manifest-config":
        manifest["config"] = "x"
    else:
        manifest["manifests"] = [{"platform": "linux"}]
    blob.write_text(json.dumps(manifest))  # its digest no longer matters: the importer reads it by name
    (layout / "index.json").write_text(json.dumps(index))
    with pytest.raises(ImageRejected):
        store.import_archive(layout, adopt_tags=True)


@pytest.mark.parametrize("whiteout", [".wh.", ".wh..", ".wh..."])
def test_whiteouts_of_the_folder_itself_or_its_parent_are_refused(tmp_path, cache, whiteout):
    lower = [folder("keep"), file("keep/x")]
    with pytest.raises(ImageRejected, match="whiteout .* not an entry of its folder"):
        store.import_archive(docker_archive(tmp_path / "wh.tar", [lower, [Entry(f"keep/{whiteout}")]]))
    assert nothing_stored(cache)


def test_a_linked_blobs_folder_is_refused(tmp_path, cache):
    """An OCI layout whose ``blobs`` is a link reads blobs from wherever the link points."""
    layout = oci_layout(tmp_path / "oci", [[file("x")]])
    elsewhere = tmp_path / "elsewhere"
    (layout / "blobs").rename(elsewhere)
    os.symlink(elsewhere, layout / "blobs")
    with pytest.raises(ImageRejected, match="reached through a link"):
        store.import_archive(layout)
    os.unlink(layout / "blobs")
    (layout / "blobs").mkdir()
    os.symlink(elsewhere / "sha256", layout / "blobs/sha256")
    with pytest.raises(ImageRejected, match="reached through a link"):
        store.import_archive(layout)
    assert nothing_stored(cache)


def test_a_linked_singularity_folder_gives_no_environment(tmp_path):
    host = tmp_path / "host-secrets"
    (host / "env").mkdir(parents=True)
    (host / "env/90-secret.sh").write_text('export SECRET="read from the host"\n')
    sandbox = tmp_path / "sandbox"
    (sandbox / "usr").mkdir(parents=True)
    os.symlink(host, sandbox / ".singularity.d")
    image, _ = store.import_archive(sandbox, tags=("site/x:1",))
    assert "SECRET" not in image.env()


def test_a_sandbox_deeper_than_the_cap_is_refused(tmp_path, cache):
    sandbox = tmp_path / "sandbox"
    os.makedirs(sandbox / "usr" / "/".join(["d"] * (MAX_DEPTH + 5)))
    with pytest.raises(ImageRejected, match="folders deep"):
        store.import_archive(sandbox, tags=("site/x:1",))
    assert nothing_stored(cache)


def test_the_deadline_and_the_free_space_bound_an_import(tmp_path, cache):
    archive = docker_archive(tmp_path / "ok.tar", [[file("x", b"data")]])
    with pytest.raises(ImageRejected, match="ran past its deadline of 0 s"):
        store.import_archive(archive, limits=store.Limits(max_seconds=0))
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(ImageRejected, match="would leave .* bytes free .* under the .* bytes kept free"):
        store.import_archive(archive, limits=store.Limits(min_free=free + (1 << 30)))
    assert nothing_stored(cache)
    assert rexmle(["images", "import", "--max-import-seconds", "0", str(archive)]) == 1


# -- images export ---------------------------------------------------------------------------------------


def test_an_export_never_writes_through_a_planted_partial_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    partial = tmp_path / ".out.tar.partial"
    os.symlink(victim, partial)
    with pytest.raises(RexmleError, match="already exists"):
        open_partial(partial)
    assert victim.read_text() == "keep me"
    fresh = open_partial(tmp_path / ".new.partial")
    fresh.write(b"ok")
    fresh.close()
    assert (tmp_path / ".new.partial").read_bytes() == b"ok"


def test_the_export_command_refuses_a_planted_partial_link(tmp_path, capsys):
    """With the Docker engine: ``rexmle images export`` stops at the planted link, the victim untouched."""
    from pytest_rexmle.images.cli import _engine

    client = _engine()
    tag = "rexmle/test-base:latest"
    if client is None or not client.images.list(name=tag):
        pytest.skip(f"needs a Docker engine holding {tag}")
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.symlink(victim, tmp_path / ".out.tar.partial")
    assert rexmle(["images", "export", "--agent", "aide", "--tag", tag, str(tmp_path / "out.tar")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert victim.read_text() == "keep me" and not (tmp_path / "out.tar").exists()
