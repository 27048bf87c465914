#!/usr/bin/env bash
# Build the Dockerfile's image with podman on a machine with no Docker engine and no image registry, then build
# its `check` target, which runs the README's main job inside the image and verifies it.
#   scripts/container_check.sh     (root, or sudo; Debian/Ubuntu)
# The base image comes from debootstrap (Debian's mirror is reachable where registries are not). pip inside the
# build gets this machine's CA bundle and its local wheel directory (the CPU torch wheel), read-only.
# Skips (exit 0, with the reason) only where podman or debootstrap cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq podman debootstrap >/dev/null; }; then
    echo "container check: SKIPPED: podman or debootstrap cannot be installed here"
    exit 0
  fi
fi
WORK="${CONTAINER_CHECK_DIR:-$(mktemp -d)}"
BASE_IMAGE=localhost/cpp-data-base-bookworm
if ! $SUDO podman image exists "$BASE_IMAGE"; then
  echo "container check: debootstrap bookworm (minbase)"
  $SUDO debootstrap --variant=minbase bookworm "$WORK/root" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log"; exit 1; }
  $SUDO tar -C "$WORK/root" -c . | $SUDO podman import - "$BASE_IMAGE" >/dev/null
  $SUDO rm -rf "$WORK/root"
fi
args=(--build-arg "BASE=$BASE_IMAGE")
[ -f /etc/ssl/certs/ca-certificates.crt ] && args+=(-v /etc/ssl/certs/ca-certificates.crt:/etc/host-ca.crt:ro
                                                  --build-arg PIP_CERT=/etc/host-ca.crt)
links=$(python3 -m pip config get global.find-links 2>/dev/null || true)
[ -n "$links" ] && [ -d "$links" ] && args+=(-v "$links:$links:ro" --build-arg "PIP_FIND_LINKS=$links")
# crun's cgroup setup fails on hosts with hybrid cgroups; chroot isolation with cgroupfs works everywhere.
# SYS_ADMIN and NET_ADMIN let bubblewrap make its namespaces inside the check's RUN step.
build() { $SUDO podman --cgroup-manager=cgroupfs build --isolation chroot --cap-add=SYS_ADMIN,NET_ADMIN \
          "${args[@]}" "$@" .; }
echo "container check: building the image (target app)"
start=$SECONDS
build --target app -t localhost/cpp-data >"$WORK/app.log" 2>&1 || { tail -30 "$WORK/app.log"; exit 1; }
echo "container check: image built in $((SECONDS - start))s; running the main job inside it (target check)"
start=$SECONDS
build --target check -t localhost/cpp-data-check >"$WORK/check.log" 2>&1 || { tail -40 "$WORK/check.log"; exit 1; }
grep -E "build summary|documents |libclang|gates passed|libclang TUs" "$WORK/check.log" | sed 's/^/  /' || true
echo "container check: passed in $((SECONDS - start))s (logs in $WORK)"
