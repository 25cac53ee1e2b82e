#!/usr/bin/env bash
# Docker for the sandbox tests, on a fresh machine or an old one: install the engine and debootstrap, start
# the engine, build the sandbox image (debootstrap + docker import; no registry). Idempotent: each step is
# skipped when its result is already there, so a second run takes a second or two. Run as root, after
# `pip install -e '.[test]'` and before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "docker-setup: $*"; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/dockerd.log)"
    # No default bridge: sandbox containers have no network, so the engine needs none either.
    setsid -f dockerd --bridge=none --iptables=false </dev/null >>/var/log/dockerd.log 2>&1
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        log "dockerd did not answer within 60 s; the end of its log:" >&2
        tail -n 30 /var/log/dockerd.log >&2 || true
        exit 1
    fi
fi

python3 -c "import docker" 2>/dev/null || { log "installing the docker Python package"; python3 -m pip install -q docker; }

log "building the sandbox image (reused when already built)"
python3 -m sandbox build-image
