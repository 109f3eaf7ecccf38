#!/usr/bin/env bash
# The newcomer path, proven: a fresh Debian 12 with nothing but python3, python3-venv and git clones this
# repository and runs one of the README's commands exactly as written (extracted from README.md, so the
# check and the README cannot drift apart), in three kinds of container:
#
#   default     `docker run` as it comes: default seccomp profile, no extra capabilities — what cloud
#               GPU pods, Kubernetes and shared servers give you (no user namespaces, so no bubblewrap)
#   user        the same container, the command run by an ordinary user (uid 1000) instead of root
#   privileged  seccomp and AppArmor unconfined plus CAP_SYS_ADMIN — a roomy container or a VM
#
# --command first (default): the benchmark; it must end with the results table: all 20 challenges graded
# (status ok), 0 FAIL, and a score line.
# --command second: the project's own tests (what contributors run first); pytest's summary must show
# 0 failed and 0 errors: every service the container lacks (Docker, Slurm, Chromium, bubblewrap, ...)
# is a skip that names it. It runs the whole suite, so it takes long (REXMLE_NEWCOMER_TIMEOUT, default
# 5400 s for it).
# REXMLE_NEWCOMER_SCORE=13.5% also requires that score; by default the score is compared with the one the
# README prints only for information, since synthetic answers are keyed by a per-cache secret unless a
# seed is pinned (a fresh machine's cache may grade the trivial baseline a little differently).
#
# The image is built like CI's test image (debootstrap minbase + `docker import`, no registry needed)
# and cached by the hash of this recipe (label rexmle.newcomer-recipe; --force rebuilds). What is
# tested is the committed HEAD of this checkout (it is cloned), never uncommitted edits.
#
# The container needs PyPI (pip installs the project). Behind a TLS-intercepting proxy, the host's CA
# bundle (REXMLE_NEWCOMER_CA, default: $PIP_CERT or $SSL_CERT_FILE when set) is mounted and given to pip,
# as such a machine's own pip configuration would. REXMLE_NEWCOMER_PIP_CACHE (a host folder) shares
# downloaded wheels between the two cases to save time; it does not change what gets installed.
#
# --worktree tests the working tree instead (tracked and untracked, not ignored, files; for developers
# checking uncommitted work): the files are copied in, and the README is read from the working tree.
#
# Usage: .ci/newcomer-check.sh [--case default|user|privileged|all] [--command first|second] [--force] [--worktree]
#        .ci/newcomer-check.sh --command second --print-command   (the command it would run, then exit)
# Logs: $REXMLE_NEWCOMER_OUT/<case>.log (default a fresh temp folder, printed). Exit 0 when every case passed.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
IMAGE="${REXMLE_NEWCOMER_IMAGE:-rexmle/newcomer:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
CASE=all
WHICH=first
PRINT=0
FORCE=0
WORKTREE=0
while (($#)); do
    case "$1" in
        --case) CASE="$2"; shift 2 ;;
        --command) WHICH="$2"; shift 2 ;;
        --print-command) PRINT=1; shift ;;
        --force) FORCE=1; shift ;;
        --worktree) WORKTREE=1; shift ;;
        *) echo "newcomer-check: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$CASE" in default|user|privileged|all) ;; *) echo "newcomer-check: --case default|user|privileged|all" >&2; exit 2 ;; esac
case "$WHICH" in first|second) ;; *) echo "newcomer-check: --command first|second" >&2; exit 2 ;; esac
OUT="${REXMLE_NEWCOMER_OUT:-$(mktemp -d /tmp/rexmle-newcomer.XXXXXX)}"
mkdir -p "$OUT"
say() { echo "newcomer-check: $*"; }

if [[ "$PRINT" == 0 ]]; then
    command -v docker >/dev/null && docker info >/dev/null 2>&1 || { say "a running Docker engine is required" >&2; exit 2; }
fi

# -- the fresh machine ---------------------------------------------------------------------------------
RECIPE="$(sed -n '/^# -- the fresh machine/,/^# -- end of recipe/p' "$0" | sha256sum | cut -c1-16)"
build_image() {
    local have
    have="$(docker image inspect "$IMAGE" --format '{{index .Config.Labels "rexmle.newcomer-recipe"}}' 2>/dev/null || true)"
    if [[ "$FORCE" == 0 && "$have" == "$RECIPE" ]]; then
        say "$IMAGE is up to date (recipe $RECIPE)"
        return 0
    fi
    command -v debootstrap >/dev/null || { say "debootstrap is missing (apt-get install debootstrap)" >&2; return 2; }
    [[ "$(id -u)" == 0 ]] || { say "building the image needs root (debootstrap)" >&2; return 2; }
    local work start
    start=$(date +%s)
    work="$(mktemp -d /tmp/rexmle-newcomer-image.XXXXXX)"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" RETURN
    say "debootstrap $SUITE minbase + python3 python3-venv git from $MIRROR"
    debootstrap --variant=minbase --include=python3,python3-venv,git "$SUITE" "$work/root" "$MIRROR" \
        >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; return 1; }
    rm -rf "$work"/root/usr/share/{doc,man,info,locale}/* "$work"/root/var/cache/apt/* "$work"/root/var/lib/apt/lists/*
    tar -C "$work/root" --numeric-owner -c . | docker import \
        --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV LANG=C.UTF-8" --change "ENV HOME=/root" --change "WORKDIR /root" \
        --change "LABEL rexmle.newcomer-recipe=$RECIPE" --change 'CMD ["bash"]' \
        -m "fresh Debian $SUITE (minbase + python3 python3-venv git) for the newcomer check" - "$IMAGE" >/dev/null
    say "built $IMAGE in $(( $(date +%s) - start )) s"
}
# -- end of recipe

# two cases may start at once (pytest-xdist): one builds, the other waits for it
if [[ "$PRINT" == 0 ]]; then  # --print-command builds nothing, so it never waits for a build
    exec 9>"/tmp/rexmle-newcomer-image.lock"
    flock 9
    build_image
    flock -u 9
fi

# The README's first (or second) command, as written; the score line it promises.
NTH=1; [[ "$WHICH" == second ]] && NTH=2
readme_command() { awk -v nth="$NTH" '/^```bash$/ {n++; if (n == nth) {inside=1}; next}
                                      inside && /^```$/ {exit} inside {print}' "$1"; }
# read the README whole first: awk stops at the closing fence, which would SIGPIPE a writer (and pipefail)
if [[ "$WORKTREE" == 1 ]]; then README_TEXT="$(cat "$REPO/README.md")"; else README_TEXT="$(git -C "$REPO" show HEAD:README.md)"; fi
readme() { printf '%s\n' "$README_TEXT"; }
COMMAND="$(readme_command <(readme))"
[[ -n "$COMMAND" ]] || { say "no \`\`\`bash block in README.md" >&2; exit 1; }
if [[ "$PRINT" == 1 ]]; then printf '%s\n' "$COMMAND"; exit 0; fi
EXPECT="${REXMLE_NEWCOMER_SCORE:-}"
README_SCORE="$(grep -oE 'ReX-MLE score: [0-9.]+%' <(readme) | sed -n '1s/.* //p' || true)"
if [[ "$WORKTREE" == 1 ]]; then
    (cd "$REPO" && git ls-files -z -co --exclude-standard | tar --null -T - -cf "$OUT/tree.tar")
    say "working tree of commit $(git -C "$REPO" rev-parse --short HEAD) (with uncommitted changes); README command: $COMMAND"
else
    say "commit $(git -C "$REPO" rev-parse --short HEAD); README command: $COMMAND"
fi
if [[ "$WHICH" == first ]]; then
    say "expected: 20 challenges ok, 0 FAIL, score ${EXPECT:-any} (the README shows ${README_SCORE:-none})"
else
    say "expected: pytest's summary with 0 failed and 0 errors"
fi

CA="${REXMLE_NEWCOMER_CA:-${PIP_CERT:-${SSL_CERT_FILE:-}}}"
run_case() {
    local case="$1" log="$OUT/$1${SUFFIX}.log" start rc=0 limit=1800
    [[ "$WHICH" == second ]] && limit=5400
    # --init: a shell session's commands never run as PID 1 (bash would exec the last one into PID 1 here)
    local -a flags=(--rm --init --name "rexmle-newcomer-$case-$$" --label rexmle.newcomer=1 -v "$REPO:/src:ro"
                    -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e PIP_DEFAULT_TIMEOUT=180 -e "WORKTREE=$WORKTREE")
    [[ "$WORKTREE" == 1 ]] && flags+=(-v "$OUT/tree.tar:/tree.tar:ro")
    # always through a bundle: a git worktree's .git names a folder not mounted, and a non-root user may not
    # clone a checkout it does not own (git's "dubious ownership", which Debian 12's git enforces)
    if [[ "$WORKTREE" == 0 ]]; then
        git -C "$REPO" bundle create -q "$OUT/head.bundle" HEAD
        flags+=(-v "$OUT/head.bundle:/head.bundle:ro" -e SOURCE=/head.bundle)
    fi
    [[ "$case" == privileged ]] && flags+=(--security-opt seccomp=unconfined --security-opt apparmor=unconfined
                                          --cap-add SYS_ADMIN)
    flags+=(-e "AS_USER=$([[ "$case" == user ]] && echo 1 || echo 0)")
    [[ -n "$CA" && -f "$CA" ]] && flags+=(-v "$CA:/etc/rexmle-newcomer-ca.pem:ro" -e PIP_CERT=/etc/rexmle-newcomer-ca.pem)
    [[ -n "${REXMLE_NEWCOMER_PIP_CACHE:-}" ]] && mkdir -p "$REXMLE_NEWCOMER_PIP_CACHE" \
        && flags+=(-v "$REXMLE_NEWCOMER_PIP_CACHE:/var/cache/rexmle-pip" -e PIP_CACHE_DIR=/var/cache/rexmle-pip)
    start=$(date +%s)
    say "[$case] docker run ${flags[*]:6} $IMAGE"
    # inside: clone the commit (as the user who runs the command), then run the README's command as written
    timeout "${REXMLE_NEWCOMER_TIMEOUT:-$limit}" docker run "${flags[@]}" "$IMAGE" bash -c '
        set -e
        as_user() { bash -c "$1"; }
        home=/root
        if [ "$AS_USER" = 1 ]; then  # an ordinary account, as on a shared server (useradd, runuser: base system)
            useradd -m -u 1000 -s /bin/bash newcomer
            [ -n "${PIP_CACHE_DIR:-}" ] && chmod 0777 "$PIP_CACHE_DIR"
            home=/home/newcomer
            as_user() { runuser -u newcomer -- env HOME=/home/newcomer bash -c "cd /home/newcomer && $1"; }
        fi
        if [ "$WORKTREE" = 1 ]; then as_user "mkdir $home/pytest-rexmle && tar -C $home/pytest-rexmle -xf /tree.tar"
        else as_user "git -c safe.directory=\"*\" clone -q ${SOURCE:-/src} $home/pytest-rexmle"; fi
        as_user "cd $home/pytest-rexmle && echo \"newcomer: python \$(python3 -c \"import sys; print(sys.version.split()[0])\"), \$(git --version), uid \$(id -u)\""
        echo "newcomer: bubblewrap installed: $(command -v bwrap || echo no)"
        echo "newcomer: \$ $1"
        as_user "cd $home/pytest-rexmle && $1"' newcomer "$COMMAND" >"$log" 2>&1 || rc=$?
    say "[$case] exit $rc after $(( $(date +%s) - start )) s; log $log"
    if [[ "$WHICH" == second ]]; then check_suite_log "$case" "$log" "$rc"; else check_log "$case" "$log" "$rc"; fi
}

check_suite_log() {
    local case="$1" log="$2" rc="$3" summary problems=()
    # pytest's last line: "==== 1290 passed, 61 skipped, 3 xfailed in 1834.20s (0:30:34) ===="
    summary="$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 || true)"
    [[ "$rc" == 0 ]] || problems+=("the command exited with $rc")
    [[ -n "$summary" ]] || problems+=("no pytest summary line")
    [[ "$summary" == *" failed"* ]] && problems+=("failures: $summary")
    [[ "$summary" == *" error"* ]] && problems+=("errors: $summary")
    if ((${#problems[@]})); then
        say "[$case] FAILED: $(IFS=';'; echo "${problems[*]}")"
        echo "----- failures and errors in $log -----"
        grep -E '^(FAILED|ERROR) ' "$log" | head -60
        echo "----- last 20 lines of $log -----"
        tail -20 "$log"
        return 1
    fi
    say "[$case] passed: $summary"
}

check_log() {
    local case="$1" log="$2" rc="$3" ok score problems=()
    ok="$(sed -n '/ReX-MLE results/,$p' "$log" | grep -cE '^[a-z0-9-]+ +ok +' || true)"
    score="$(grep -oE '^ReX-MLE score: [0-9.]+% over 20 task\(s\), 0 FAIL$' "$log" | grep -oE '[0-9.]+%' || true)"
    [[ "$rc" == 0 ]] || problems+=("the command exited with $rc")
    [[ "$ok" == 20 ]] || problems+=("$ok of 20 challenges graded ok")
    [[ -n "$score" ]] || problems+=("no line 'ReX-MLE score: ...% over 20 task(s), 0 FAIL'")
    if [[ -n "$score" && -n "$EXPECT" && "$EXPECT" != any && "$score" != "$EXPECT" ]]; then
        problems+=("score $score, expected $EXPECT")
    fi
    if ((${#problems[@]})); then
        say "[$case] FAILED: $(IFS=';'; echo "${problems[*]}")"
        echo "----- last 40 lines of $log -----"
        tail -40 "$log"
        return 1
    fi
    say "[$case] passed: 20 challenges ok, 0 FAIL, score $score (README: ${README_SCORE:-none})"
}

SUFFIX=""; [[ "$WHICH" == second ]] && SUFFIX="-tests"
status=0
if [[ "$CASE" == all || "$CASE" == default ]]; then run_case default || status=1; fi
if [[ "$CASE" == all || "$CASE" == user ]]; then run_case user || status=1; fi
if [[ "$CASE" == all || "$CASE" == privileged ]]; then run_case privileged || status=1; fi
say "logs in $OUT"
exit $status
