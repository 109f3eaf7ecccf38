#!/usr/bin/env bash
# CI: make a Docker engine available and build the images the README's `rexmle images build` makes.
#  1. install docker.io (engine + CLI), debootstrap, and podman with catatonit (its --init; the docker runtime's
#     tests also run against Podman's Docker-compatible service) when missing;
#  2. start /usr/sbin/dockerd in the background when no engine answers, and wait (up to
#     REXMLE_DOCKERD_WAIT seconds, default 60) until `docker info` works;
#  3. build rexmle/test-base:latest with .ci/build-test-image.sh (a no-op when it is current): the offline
#     Debian image the stand-in of Docker Hub's PyTorch image starts from;
#  4. answer Docker Hub at the network edge: .ci/registry-mirror.sh serves that stand-in from a loopback
#     registry set as the engine's registry mirror;
#  5. build the real recipes with .ci/build-agent-images.sh (`rexmle images build --agent NAME`, each a
#     no-op when current).
# .ci/run calls this and then exports REXMLE_REQUIRE_DOCKER=1, so a missing engine fails the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v catatonit >/dev/null 2>&1 || need+=(catatonit)
if ((${#need[@]})); then
    echo "docker-setup: installing ${need[*]}"
    (apt-get install -y -q "${need[@]}" || (apt-get update -q && apt-get install -y -q "${need[@]}")) >/dev/null
fi
python3 -c "import docker" 2>/dev/null || python3 -m pip install -q docker

if ! docker info >/dev/null 2>&1; then
    echo "docker-setup: starting dockerd"
    mkdir -p /var/log
    nohup /usr/sbin/dockerd >/var/log/rexmle-dockerd.log 2>&1 &
    wait_s="${REXMLE_DOCKERD_WAIT:-60}"
    for ((i = 0; i < wait_s; i++)); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        echo "docker-setup: dockerd did not come up within ${wait_s} s; last log lines:" >&2
        tail -20 /var/log/rexmle-dockerd.log >&2 || true
        exit 1
    fi
fi
echo "docker-setup: engine $(docker info --format '{{.ServerVersion}}') is up"

.ci/build-test-image.sh
.ci/registry-mirror.sh
# Not fatal here: the tests build what is missing the same way and report why a build fails.
.ci/build-agent-images.sh || echo "docker-setup: some agent images were not built; the tests will retry" >&2
