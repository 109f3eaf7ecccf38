"""``rexmle images import``: an image archive is a hostile input. Each attack a layer can carry is refused
or neutralised, with a message naming the entry; what a legitimate image needs (whiteouts, links inside
the root, OCI layouts, Apptainer sandboxes) still works. No Docker engine is involved."""

from __future__ import annotations

import gzip
import json
import os
import stat
import tarfile

import pytest

from pytest_rexmle.cli import main as rexmle
from pytest_rexmle.images import store
from pytest_rexmle.images.unpack import ImageRejected

from .craft import Entry, config_for, docker_archive, file, folder, hardlink, layer_tar, oci_layout, symlink


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("REXMLE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def outside(tmp_path):
    """A host folder no image may write into."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def nothing_stored(cache) -> bool:
    images = cache / "images"
    return not images.exists() or not any(images.iterdir())


def test_a_docker_archive_unpacks_by_digest_with_its_config(tmp_path):
    archive = docker_archive(tmp_path / "ok.tar", [[folder("usr"), folder("usr/bin"), file("usr/bin/tool", b"#!/bin/sh\n", 0o755),
                                                    symlink("bin", "usr/bin")]], tags=("lab/agent:1",))
    image, report = store.import_archive(archive, adopt_tags=True)
    assert image.digest.startswith("sha256:") and image.folder.name == image.digest.replace(":", "-")
    assert (image.rootfs / "usr/bin/tool").read_bytes() == b"#!/bin/sh\n"
    assert os.readlink(image.rootfs / "bin") == "usr/bin"
    assert stat.S_IMODE((image.rootfs / "usr/bin/tool").stat().st_mode) == 0o755
    assert image.env()["PATH"] == "/usr/local/bin:/usr/bin:/bin" and image.tags == ["lab/agent:1"]
    assert store.find("lab/agent:1").digest == image.digest
    again, report_again = store.import_archive(archive, tags=("lab/agent:latest",))
    assert report_again is None and again.folder == image.folder  # content-addressed: imported once
    assert store.find("lab/agent:latest").digest == image.digest


def test_path_traversal_is_refused_and_nothing_is_written(tmp_path, outside, cache):
    archive = docker_archive(tmp_path / "evil.tar", [[file("../../outside/pwned")]])
    with pytest.raises(ImageRejected, match=r"entry '../../outside/pwned' climbs out of the image's root"):
        store.import_archive(archive)
    assert list(outside.iterdir()) == [] and nothing_stored(cache)


def test_an_absolute_name_is_refused(tmp_path, outside, cache):
    archive = docker_archive(tmp_path / "evil.tar", [[file(str(outside / "pwned"))]])
    with pytest.raises(ImageRejected, match="has an absolute name"):
        store.import_archive(archive)
    assert list(outside.iterdir()) == [] and nothing_stored(cache)


@pytest.mark.parametrize("same_layer", [False, True])
def test_a_symlink_out_of_the_root_is_followed_inside_it_only(tmp_path, outside, same_layer):
    """Layer 1 points ``evil`` at a host folder, layer 2 (or the same layer) writes ``evil/pwned`` through it:
    the file lands in the image's own copy of that path, never on the host."""
    link, payload = symlink("evil", str(outside)), file("evil/pwned", b"owned")
    relative = symlink("up", "../../../../../../../..")
    layers = [[link, relative, payload, file("up/tmp/pwned2")]] if same_layer else [[link, relative], [payload, file("up/tmp/pwned2")]]
    image, _ = store.import_archive(docker_archive(tmp_path / "evil.tar", layers))
    assert list(outside.iterdir()) == []
    assert not os.path.exists("/tmp/pwned2")
    inside = image.rootfs / str(outside).lstrip("/") / "pwned"
    assert inside.read_bytes() == b"owned"
    assert (image.rootfs / "tmp" / "pwned2").is_file()


def test_an_entry_replaces_a_symlink_at_its_place_instead_of_writing_through_it(tmp_path, outside):
    target = outside / "victim"
    target.write_text("host file")
    image, _ = store.import_archive(docker_archive(tmp_path / "evil.tar", [[symlink("f", str(target))],
                                                                           [file("f", b"overwritten")]]))
    assert target.read_text() == "host file"
    assert not (image.rootfs / "f").is_symlink() and (image.rootfs / "f").read_bytes() == b"overwritten"


@pytest.mark.parametrize("link", ["../../etc/passwd", "/etc/passwd", "out"])
def test_a_hard_link_must_point_at_a_file_inside_the_root(tmp_path, cache, link):
    entries = [symlink("out", "/etc/passwd"), hardlink("passwd", link)]
    with pytest.raises(ImageRejected, match="passwd"):
        store.import_archive(docker_archive(tmp_path / "evil.tar", [entries]))
    assert nothing_stored(cache)


def test_a_hard_link_inside_the_root_works(tmp_path):
    image, _ = store.import_archive(docker_archive(tmp_path / "ok.tar", [[file("a", b"same"), hardlink("b", "a")]]))
    assert (image.rootfs / "b").read_bytes() == b"same"
    assert (image.rootfs / "a").stat().st_ino == (image.rootfs / "b").stat().st_ino


def test_device_nodes_and_fifos_are_never_created(tmp_path):
    entries = [folder("dev"), Entry("dev/mem", tarfile.CHRTYPE), Entry("dev/sda", tarfile.BLKTYPE),
               Entry("fifo", tarfile.FIFOTYPE), file("ok")]
    image, report = store.import_archive(docker_archive(tmp_path / "dev.tar", [entries]))
    assert sorted(report.devices_skipped) == ["dev/mem", "dev/sda", "fifo"]
    assert not os.path.lexists(image.rootfs / "dev/mem") and not os.path.lexists(image.rootfs / "fifo")
    assert image.manifest["devices_skipped"] == report.devices_skipped
    assert "skipped 3 device node(s)" in report.notes()[0]


def test_setuid_and_setgid_bits_are_dropped(tmp_path):
    entries = [file("su", b"x", 0o4755), file("sg", b"x", 0o2755), file("world", b"x", 0o666)]
    image, report = store.import_archive(docker_archive(tmp_path / "suid.tar", [entries]))
    assert {name: stat.S_IMODE((image.rootfs / name).stat().st_mode) for name in ("su", "sg", "world")} == \
        {"su": 0o755, "sg": 0o755, "world": 0o644}  # nor can anyone but the importer write the shared copy
    assert sorted(report.setuid_stripped) == ["sg", "su"]


def test_a_declared_huge_entry_is_refused_before_anything_is_read(tmp_path, cache):
    entries = [Entry("huge", size=1 << 40)]  # a header claiming a TiB, no body
    with pytest.raises(ImageRejected, match=r"'huge' declares 1099511627776 bytes, past the per-layer cap"):
        store.import_archive(docker_archive(tmp_path / "huge.tar", [entries]), max_layer=1 << 20)
    assert nothing_stored(cache)


def test_a_sparse_terabyte_is_refused_by_its_logical_size(tmp_path, cache):
    """GNU tar stores a 1 TiB sparse file in 10 KiB: the cap applies to what it would unpack to."""
    import shutil
    import subprocess

    if shutil.which("tar") is None:
        pytest.skip("GNU tar makes the sparse member")
    (tmp_path / "big").touch()
    os.truncate(tmp_path / "big", 1 << 40)
    subprocess.run(["tar", "--sparse", "-cf", str(tmp_path / "layer.tar"), "big"], cwd=tmp_path, check=True)
    layer = (tmp_path / "layer.tar").read_bytes()
    assert len(layer) < 100_000
    with pytest.raises(ImageRejected, match=r"'big' declares 1099511627776 bytes, past the per-layer cap"):
        store.import_archive(docker_archive(tmp_path / "sparse.tar", [], raw_layers=[layer]))
    assert nothing_stored(cache)


def test_a_compressed_bomb_is_stopped_by_the_bytes_actually_written(tmp_path, cache):
    """8 MiB of zeros gzip to a few KiB: the cap counts what is written, not what the archive weighs."""
    tars = [layer_tar([file(f"zeros{i}", bytes(4 << 20)) for i in range(2)])]
    layout = tmp_path / "bomb"
    oci_layout(layout, [[file(f"zeros{i}", bytes(4 << 20)) for i in range(2)]])
    assert sum(p.stat().st_size for p in (layout / "blobs/sha256").iterdir()) < 100_000
    with pytest.raises(ImageRejected, match=r"'zeros1' (declares|writes) \d+ bytes, past the image's cap of 6291456"):
        store.import_archive(layout, max_total=6 << 20)
    assert nothing_stored(cache) and len(tars[0]) > 8 << 20


def test_whiteouts_and_opaque_folders_remove_lower_layers(tmp_path):
    lower = [folder("a"), file("a/b"), file("a/c"), file("d"), folder("keep"), file("keep/x")]
    upper = [file("a/e"), Entry("a/.wh..wh..opq"), Entry(".wh.d"), file("a/f")]
    image, _ = store.import_archive(docker_archive(tmp_path / "wh.tar", [lower, upper]))
    assert sorted(p.name for p in (image.rootfs / "a").iterdir()) == ["e", "f"]
    assert not (image.rootfs / "d").exists() and (image.rootfs / "keep/x").is_file()
    assert not any(p.name.startswith(".wh.") for p in image.rootfs.rglob("*"))


def test_a_whiteout_cannot_delete_outside_the_root(tmp_path, outside):
    victim = outside / "victim"
    victim.write_text("keep me")
    entries = [symlink("link", str(outside)), Entry("link/.wh.victim")]
    store.import_archive(docker_archive(tmp_path / "wh.tar", [entries]))
    assert victim.read_text() == "keep me"


def test_a_layer_that_does_not_match_the_config_is_refused(tmp_path, cache):
    config = config_for([layer_tar([file("other")])])
    archive = docker_archive(tmp_path / "swap.tar", [[file("swapped")]], config=config)
    with pytest.raises(ImageRejected, match="layer 1/1 .* does not match the image's config"):
        store.import_archive(archive)
    assert nothing_stored(cache)


def test_a_manifest_naming_a_member_outside_the_archive_is_refused(tmp_path):
    path = tmp_path / "bad.tar"
    docker_archive(path, [[file("x")]])
    with tarfile.open(path, "a") as tar:
        data = json.dumps([{"Config": "../../etc/passwd", "Layers": []}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        import io
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ImageRejected, match="outside itself"):
        store.import_archive(path)


def test_an_oci_layout_folder_with_gzip_layers(tmp_path):
    layout = oci_layout(tmp_path / "oci", [[folder("opt"), folder("opt/tool"), file("opt/tool/run", b"go", 0o755)],
                                           [Entry("opt/tool/.wh.run"), file("opt/tool/run2")]])
    image, _ = store.import_archive(layout, adopt_tags=True)
    assert image.tags == ["oci/image:1"] and image.manifest["source"] == "oci-layout"
    assert sorted(p.name for p in (image.rootfs / "opt/tool").iterdir()) == ["run2"]
    assert image.env() == {"PATH": "/opt/tool/bin:/usr/bin:/bin", "TOOL_HOME": "/opt/tool"}
    tarred = tmp_path / "oci.tar"
    with tarfile.open(tarred, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
    assert store.import_archive(tarred)[0].digest == image.digest


def test_an_apptainer_sandbox_folder_takes_a_tag_and_its_environment(tmp_path):
    sandbox = tmp_path / "sandbox"
    (sandbox / "usr/bin").mkdir(parents=True)
    (sandbox / "usr/bin/tool").write_text("t")
    os.chmod(sandbox / "usr/bin/tool", 0o4755)
    (sandbox / ".singularity.d/env").mkdir(parents=True)
    (sandbox / ".singularity.d/env/10-docker2singularity.sh").write_text(
        '#!/bin/sh\nexport PATH="/opt/conda/bin:/usr/bin:/bin"\nexport EVIL="$(id)"\nexport LANG="C.UTF-8"\n')
    os.symlink("/etc/shadow", sandbox / "shadow")
    os.mkfifo(sandbox / "fifo")
    with pytest.raises(ImageRejected, match="pass --tag"):
        store.import_archive(sandbox)
    image, report = store.import_archive(sandbox, tags=("site/aide:sif",))
    assert image.manifest["source"] == "apptainer-sandbox" and store.find("site/aide:sif") == image
    assert image.env() == {"PATH": "/opt/conda/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}  # no expansion taken
    assert os.readlink(image.rootfs / "shadow") == "/etc/shadow"  # a link, resolved only inside the sandbox
    assert stat.S_IMODE((image.rootfs / "usr/bin/tool").stat().st_mode) == 0o755
    assert report.devices_skipped == ["fifo"] and report.setuid_stripped == ["usr/bin/tool"]


def test_the_cli_refuses_with_the_reason_and_imports_and_lists(tmp_path, outside, capsys):
    evil = docker_archive(tmp_path / "evil.tar", [[file("../outside/pwned")]])
    assert rexmle(["images", "import", str(evil)]) == 1
    assert "refused" in capsys.readouterr().err and list(outside.iterdir()) == []
    good = docker_archive(tmp_path / "good.tar", [[folder("usr"), file("usr/x")]], tags=("rexmle/aide:latest",))
    assert rexmle(["images", "import", "--tag", "rexmle/aide:latest", str(good)]) == 0
    assert "imported rexmle/aide:latest" in capsys.readouterr().out
    assert rexmle(["images", "list"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("aide "))
    assert store.find("rexmle/aide:latest").digest[:19] in line


def test_gzip_layers_in_a_docker_archive(tmp_path):
    """``docker save`` of newer engines may carry compressed layers: read by their magic, not their name."""
    path = docker_archive(tmp_path / "plain.tar", [[file("x", b"1")]])
    with tarfile.open(path) as tar:
        layer = tar.extractfile("000/layer.tar").read()
        config = tar.extractfile(next(n for n in tar.getnames() if n.endswith(".json") and n != "manifest.json")).read()
    zipped = tmp_path / "zipped.tar"
    with tarfile.open(zipped, "w") as tar:
        import io
        for name, data in (("000/layer.tar", gzip.compress(layer)), ("c.json", config),
                           ("manifest.json", json.dumps([{"Config": "c.json", "RepoTags": ["z:1"],
                                                          "Layers": ["000/layer.tar"]}]).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert (store.import_archive(zipped)[0].rootfs / "x").read_bytes() == b"1"
