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

build base
build aide
build ml-master --source "${REXMLE_ML_MASTER_SOURCE:-tests/docker/ml_master_standin}"
build rd-agent
build claude-code
build codex
build gemini-cli
build mini-swe-agent
exit "$failed"
