#!/usr/bin/env bash
# CI: build the real image recipes exactly as the README says (`rexmle images build --agent NAME`, no --base):
#   rexmle/base            agents/common        FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime, which CI's
#                                               engine pulls through the loopback registry mirror
#                                               (.ci/registry-mirror.sh serves a stand-in under that name)
#   rexmle/aide, rexmle/rd-agent                aideml / rdagent from PyPI, on rexmle/base
#   rexmle/ml-master       agents/ml_master     --source tests/docker/ml_master_standin: ML-Master's GitHub is
#                                               unreachable here, so the stand-in is the source (the recipe is
#                                               untouched); with REXMLE_ML_MASTER_SOURCE naming a checkout of the
#                                               real ML-Master, that checkout instead
#   rexmle/claude-code, codex, gemini-cli, mini-swe-agent   the coding CLIs (npm / PyPI), on rexmle/base
# `rexmle images build` labels each image with a hash of its recipe, context and base image id and skips
# the build when the tag already carries it, so a repeated run costs seconds. Each line says the build's time
# and the image's size; the full log of a build is /tmp/rexmle-build-<agent>.log.
# Every agent image is FROM rexmle/base, so their layers share its 8 GB (`docker system df -v`: each agent adds
# 35 MB to 2 GB). Once the base is built, rd-agent (the longest build: 633 s of about 970 s for the seven agents,
# measured from a clean engine) builds beside the six others, which follow one another: the builds wait on
# downloads and the disk as much as on the two cores. REXMLE_IMAGE_BUILD_JOBS=1 builds them one at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
CA=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && CA=(--ca-bundle /etc/ssl/certs/ca-certificates.crt)
failed=0

build() {  # build <agent> [extra args]
    local agent="$1"; shift
    local start; start=$(date +%s)
    if ! rexmle images build --agent "$agent" "${CA[@]}" "$@" >"/tmp/rexmle-build-$agent.log" 2>&1; then
        echo "build-agent-images: $agent failed after $(( $(date +%s) - start )) s; last lines:" >&2
        tail -30 "/tmp/rexmle-build-$agent.log" >&2
        failed=1
        return 0
    fi
    local size; size="$(docker image inspect "rexmle/$agent:latest" --format '{{.Size}}')"
    echo "build-agent-images: rexmle/$agent:latest ready ($((size / 1000000)) MB, $(( $(date +%s) - start )) s)"
}

others() {
    build aide
    build ml-master --source "${REXMLE_ML_MASTER_SOURCE:-tests/docker/ml_master_standin}"
    build claude-code
    build codex
    build gemini-cli
    build mini-swe-agent
}

build base
if [[ "${REXMLE_IMAGE_BUILD_JOBS:-2}" -gt 1 ]]; then
    (build rd-agent; exit "$failed") &
    beside=$!
    others
    wait "$beside" || failed=1
else
    build rd-agent
    others
fi
exit "$failed"
