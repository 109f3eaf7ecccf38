#!/usr/bin/env bash
# CI: answer Docker Hub at the network edge only. Docker Hub is unreachable here, yet the real base recipe
# (pytest_rexmle/agents/common/Dockerfile) starts FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime. So:
#  1. Debian's `docker-registry` serves on loopback (127.0.0.1:$REXMLE_MIRROR_PORT, default 5055; storage
#     $REXMLE_MIRROR_STORAGE, default /var/lib/rexmle-mirror), started in the background when it does not answer;
#  2. the engine takes it as its registry mirror ("registry-mirrors" in /etc/docker/daemon.json, applied by
#     SIGHUP: a reloadable option, running containers are untouched), so a pull of a Docker Hub image asks it first;
#  3. the stand-in of the PyTorch image (.ci/torch-standin/Dockerfile, FROM the offline test image) is built and
#     pushed to it as pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime — a no-op when the registry already holds
#     the tag built from this recipe and base (hash in the image's label). The push is skopeo's (6.2 GB: 101 s
#     here at gzip level 1, where `docker push` took 835 s).
# Nothing of the recipes changes: `rexmle images build --agent base` pulls "from Docker Hub" and gets the stand-in.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${REXMLE_MIRROR_PORT:-5055}"
STORAGE="${REXMLE_MIRROR_STORAGE:-/var/lib/rexmle-mirror}"
MIRROR="127.0.0.1:$PORT"
UPSTREAM="pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
FROM_IMAGE="${REXMLE_TEST_IMAGE:-rexmle/test-base:latest}"
DAEMON_JSON="${REXMLE_DAEMON_JSON:-/etc/docker/daemon.json}"
export DEBIAN_FRONTEND=noninteractive

answers() { python3 -c "import urllib.request,sys; urllib.request.urlopen('http://$MIRROR/v2/', timeout=3)" 2>/dev/null; }

# 1. the registry, loopback only
need=()
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)  # the push: gzip level 1 on every core (docker push: 6, one)
if ((${#need[@]})); then
    (apt-get install -y -q --no-install-recommends "${need[@]}" \
        || (apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}")) >/dev/null
fi
if ! answers; then
    mkdir -p "$STORAGE"
    config="$STORAGE/config.yml"
    cat >"$config" <<YAML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $STORAGE/data}, delete: {enabled: true}}
http: {addr: "$MIRROR"}
YAML
    echo "registry-mirror: starting docker-registry on $MIRROR"
    setsid nohup docker-registry serve "$config" >/var/log/rexmle-registry.log 2>&1 < /dev/null &
    for _ in $(seq 30); do answers && break; sleep 1; done
    answers || { echo "registry-mirror: docker-registry did not answer on $MIRROR" >&2; tail -20 /var/log/rexmle-registry.log >&2; exit 1; }
fi

# 2. the engine's registry mirror
changed="$(python3 - "$DAEMON_JSON" "http://$MIRROR" <<'PY'
import json, sys
from pathlib import Path
path, mirror = Path(sys.argv[1]), sys.argv[2]
config = json.loads(path.read_text() or "{}") if path.is_file() else {}
if mirror in config.get("registry-mirrors", []):
    print("no")
else:
    config["registry-mirrors"] = [mirror, *config.get("registry-mirrors", [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    print("yes")
PY
)"
mirrors() { docker info --format '{{range .RegistryConfig.Mirrors}}{{.}} {{end}}'; }
if [[ "$(mirrors)" != *"$MIRROR"* ]]; then
    [[ "$changed" == yes ]] && echo "registry-mirror: $DAEMON_JSON names http://$MIRROR; reloading dockerd"
    kill -HUP "$(cat /var/run/docker.pid)"
    for _ in $(seq 20); do [[ "$(mirrors)" == *"$MIRROR"* ]] && break; sleep 1; done
    [[ "$(mirrors)" == *"$MIRROR"* ]] || { echo "registry-mirror: dockerd does not list the mirror" >&2; exit 1; }
fi

# 3. the stand-in of Docker Hub's PyTorch image, pushed under Docker Hub's name
base_id="$(docker image inspect "$FROM_IMAGE" --format '{{.Id}}')"
recipe="$( (cat .ci/torch-standin/Dockerfile; echo "$base_id") | sha256sum | cut -c1-16)"
pushed="$(python3 - "$MIRROR" "$UPSTREAM" <<'PY'
import json, sys, urllib.request
mirror, (repo, tag) = sys.argv[1], sys.argv[2].split(":")
def get(path, accept):
    req = urllib.request.Request(f"http://{mirror}/v2/{repo}/{path}", headers={"Accept": accept})
    return json.load(urllib.request.urlopen(req, timeout=10))
try:
    manifest = get(f"manifests/{tag}", "application/vnd.docker.distribution.manifest.v2+json")
    config = get(f"blobs/{manifest['config']['digest']}", "*/*")
    print((config.get("config") or {}).get("Labels", {}).get("rexmle.recipe", ""))
except Exception:
    print("")
PY
)"
if [[ "$pushed" == "$recipe" ]]; then
    echo "registry-mirror: $MIRROR serves $UPSTREAM (stand-in, recipe $recipe)"
    exit 0
fi
start=$(date +%s)
ctx="$(mktemp -d /tmp/rexmle-torch-standin.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
cp .ci/torch-standin/Dockerfile "$ctx/"
ca=/etc/ssl/certs/ca-certificates.crt
for var in PIP_CERT REQUESTS_CA_BUNDLE SSL_CERT_FILE; do [[ -f "${!var:-}" ]] && { ca="${!var}"; break; }; done
if [[ -f "$ca" ]]; then cp "$ca" "$ctx/extra-ca.pem"; else : >"$ctx/extra-ca.pem"; fi
echo "registry-mirror: building the stand-in of $UPSTREAM FROM $FROM_IMAGE (torch from PyPI)"
docker build -q --build-arg "FROM_IMAGE=$FROM_IMAGE" --label "rexmle.recipe=$recipe" -t "$MIRROR/$UPSTREAM" "$ctx" >/dev/null
built=$(date +%s)
skopeo copy -q --dest-tls-verify=false --dest-compress-format gzip --dest-compress-level 1 \
    "docker-daemon:$MIRROR/$UPSTREAM" "docker://$MIRROR/$UPSTREAM"
size="$(docker image inspect "$MIRROR/$UPSTREAM" --format '{{.Size}}')"
echo "registry-mirror: $MIRROR serves $UPSTREAM (stand-in, $((size / 1000000)) MB; built in $((built - start)) s, pushed in $(( $(date +%s) - built )) s)"
