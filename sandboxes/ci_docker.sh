#!/usr/bin/env bash
# CI setup of the Docker sandbox: install an engine and what the offline image build needs (nothing else:
# the local backend's bwrap comes from pip, and CI must not install what a newcomer would not have),
# start the daemon without any network of its own, and build (or reuse) the sandbox images: `project` and
# `reference` (the reference's runtime packages, pip-installed from PyPI into its root filesystem).
#
#   sandboxes/ci_docker.sh          # install (if needed), start dockerd (if none answers), build the images
#   sandboxes/ci_docker.sh prepare  # only what needs no engine: install, and write the images' root filesystems
#                                   # (CI runs it beside its first stage; the next setup imports them)
#   sandboxes/ci_docker.sh stop     # stop the daemon this script started (and remove sandbox containers)
#
# Environment:
#   DOCKERD_WAIT   seconds to wait for the daemon to answer (default 60)
#   PYTHON         interpreter with the project installed (default python3)
#   STATE_DIR      where the pid and log of the started daemon are kept (default /tmp/cleaner-dockerd)
set -euo pipefail

DOCKERD_WAIT="${DOCKERD_WAIT:-60}"
PYTHON="${PYTHON:-python3}"
STATE_DIR="${STATE_DIR:-/tmp/cleaner-dockerd}"
PIDFILE="$STATE_DIR/dockerd.pid"
LOGFILE="$STATE_DIR/dockerd.log"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

log() { echo "[ci_docker] $*" >&2; }

engine_answers() { $SUDO docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

stop() {
  if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    if engine_answers; then
      ids="$($SUDO docker ps -aq --filter label=cleaner.sandbox || true)"
      if [ -n "$ids" ]; then $SUDO docker rm -f $ids >/dev/null || true; fi
    fi
    if kill -0 "$pid" 2>/dev/null; then
      log "stopping dockerd (pid $pid)"
      $SUDO kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      if kill -0 "$pid" 2>/dev/null; then log "dockerd did not stop in 30 s; killing it"; $SUDO kill -9 "$pid"; fi
    fi
    rm -f "$PIDFILE"
  else
    log "no dockerd started by this script (no $PIDFILE); nothing to stop"
  fi
}

install() {
  local need=()
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
  if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

start() {
  if engine_answers; then
    log "a Docker engine already answers; using it"
    return
  fi
  mkdir -p "$STATE_DIR"
  log "starting dockerd --bridge=none --iptables=false (log: $LOGFILE)"
  # No bridge and no iptables rules: sandboxes run with network_mode=none and need no network at all.
  $SUDO sh -c "nohup dockerd --bridge=none --iptables=false --ip6tables=false >'$LOGFILE' 2>&1 & echo \$! >'$PIDFILE'"
  local waited=0
  until engine_answers; do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "dockerd exited during start-up; last lines of $LOGFILE:"; tail -20 "$LOGFILE" >&2; exit 1
    fi
    if [ "$waited" -ge "$DOCKERD_WAIT" ]; then
      log "dockerd did not answer within ${DOCKERD_WAIT} s; last lines of $LOGFILE:"; tail -20 "$LOGFILE" >&2; exit 1
    fi
    sleep 1; waited=$((waited + 1))
  done
  log "dockerd answers after ${waited} s"
}

VARIANTS="project reference"
# The root filesystem of a variant's current recipe: named by its tag, so a tarball of another recipe is never
# imported.
rootfs() { echo "$STATE_DIR/rootfs-$("$PYTHON" -m sandboxes.image tag --variant "$1" | tr ':/' '--').tar"; }

case "${1:-setup}" in
  stop) stop ;;
  prepare)
    install
    mkdir -p "$STATE_DIR"
    for variant in $VARIANTS; do
      tarball="$(rootfs "$variant")"
      log "writing the $variant sandbox image's root filesystem to $tarball"
      $SUDO env "PATH=$PATH" "$PYTHON" -m sandboxes.image rootfs --variant "$variant" "$tarball"
    done
    ;;
  setup)
    install
    start
    for variant in $VARIANTS; do
      log "building the $variant sandbox image (reused when its content hash is present)"
      tarball="$(rootfs "$variant")"
      if [ -f "$tarball" ]; then  # prepared: import it, then it is not needed any more
        $SUDO env "PATH=$PATH" "$PYTHON" -m sandboxes.image build --variant "$variant" --tarball "$tarball"
        rm -f "$tarball"
      else
        $SUDO env "PATH=$PATH" "$PYTHON" -m sandboxes.image build --variant "$variant"
      fi
    done
    ;;
  *) echo "usage: $0 [setup|prepare|stop]" >&2; exit 2 ;;
esac
