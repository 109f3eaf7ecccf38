#!/usr/bin/env bash
# Build the offline CI/test image `rexmle/test-base:latest` without any container registry.
#
# Why not a Dockerfile: no registry is reachable from CI, so there is no base image to start FROM.
# Instead debootstrap a minimal Debian (bookworm, --variant=minbase, with python3), add the Python
# packages that agents' own code commonly needs (NumPy, SimpleITK, ...), and `docker import` the tree.
#
# The harness's own code is NOT in it and not mounted either: an agent validates through its run's
# `rexmle validate` (a standard-library client of the session's gateway, bound in by the runtime).
#
# Packages come from the host's pip (`--target`): the host is Python 3.11 on glibc Linux, the same ABI
# as bookworm's python3.11, and that avoids installing pip's Debian dependency tree into the image.
# pip itself is added to the image so that agent images (pytest_rexmle/agents/aide, ...) can build FROM it.
#
# Skips the build when the image exists and was built from this very recipe (hash in a label);
# `--force` rebuilds. Environment: REXMLE_TEST_IMAGE, DEBIAN_MIRROR, DEBIAN_SUITE, PYTHON.
set -euo pipefail

IMAGE="${REXMLE_TEST_IMAGE:-rexmle/test-base:latest}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${DEBIAN_SUITE:-bookworm}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")" && pwd)"

# Runtime dependencies of pytest_rexmle (pyproject minus pytest plugins) + pycocotools (DENTEX grader)
# + pip (so that pytest_rexmle/agents/<agent>/Dockerfile can build on top of this image in tests).
PACKAGES=(numpy scipy pandas SimpleITK scikit-image Pillow tifffile PyYAML filelock nibabel pycocotools pip)

RECIPE="$( (cat "$0"; echo "${PACKAGES[*]} $SUITE") | sha256sum | cut -c1-16)"
if [[ "${1:-}" != "--force" ]]; then
    have="$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "rexmle.recipe"}}' 2>/dev/null || true)"
    if [[ "$have" == "$RECIPE" ]]; then
        echo "build-test-image: $IMAGE is up to date (recipe $RECIPE)"
        exit 0
    fi
fi

command -v debootstrap >/dev/null || { echo "build-test-image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "build-test-image: debootstrap needs root" >&2; exit 2; }

start=$(date +%s)
WORK="$(mktemp -d /tmp/rexmle-test-image.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/rootfs"

echo "build-test-image: debootstrap $SUITE (minbase + python3) from $MIRROR"
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -30 "$WORK/debootstrap.log" >&2; exit 1; }

PYVER="$(chroot "$ROOT" python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
HOSTVER="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
if [[ "$PYVER" != "$HOSTVER" ]]; then
    echo "build-test-image: image python $PYVER != host $PYTHON $HOSTVER; set PYTHON to a python$PYVER" >&2
    exit 2
fi
SITE="$ROOT/usr/local/lib/python$PYVER/dist-packages"
mkdir -p "$SITE"

echo "build-test-image: pip install ${PACKAGES[*]}"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-warn-script-location --no-warn-conflicts --target "$SITE" \
    --only-binary=:all: "${PACKAGES[@]}"
# console scripts written by --target carry the host interpreter in their shebang: useless inside
rm -rf "$SITE/bin"

# no `rexmle` here: each run's tools folder brings the agent's `rexmle validate` (runtime/agent_tools.py)
ln -sf /usr/bin/python3 "$ROOT/usr/local/bin/python"
# the default container user (the runtime uses 1000:1000 when the run folder belongs to root): a passwd
# entry keeps getpass/pwd-based code (torch, matplotlib caches) from failing on an unknown uid
echo "agent:x:1000:1000:rexmle agent:/rexmle/workspace:/bin/sh" >>"$ROOT/etc/passwd"
echo "agent:x:1000:" >>"$ROOT/etc/group"

# Slim down: docs, locales, apt caches, package test suites.
rm -rf "$ROOT"/usr/share/{doc,man,info,locale}/* "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* \
       "$ROOT"/var/log/* "$ROOT"/tmp/*
find "$SITE" -depth -type d -name tests -prune -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$ROOT/rexmle" "$ROOT/opt/rexmle"

echo "build-test-image: docker import as $IMAGE"
tar -C "$ROOT" --numeric-owner -c . | docker import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV PYTHONDONTWRITEBYTECODE=1" \
    --change "LABEL rexmle.recipe=$RECIPE" \
    --change 'CMD ["python3"]' \
    -m "rexmle test image ($SUITE minbase + python$PYVER + rexmle deps)" - "$IMAGE" >/dev/null

size="$(docker image inspect "$IMAGE" --format '{{.Size}}')"
echo "build-test-image: built $IMAGE ($((size / 1000000)) MB) in $(( $(date +%s) - start )) s"
