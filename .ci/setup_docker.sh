#!/usr/bin/env bash
# Make the Docker sandbox usable in CI: packages, a running engine, and the sandbox image built
# offline (`mappa sandbox build`: debootstrap + docker import). Idempotent: it skips every step
# that is already done. It never fails the CI run: where no engine can run it says why and exits 0,
# and the docker-marked tests then skip with the reason docker_status() gives.
set -u
PYTHON=${PYTHON:-.venv/bin/python}
IMAGE=${MAPPA_SANDBOX_IMAGE:-mappa-sandbox:latest}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=$(command -v sudo || true)
say() { echo "setup_docker: $*"; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -o DPkg::Lock::Timeout=300 -y -qq "${missing[@]}"; } \
    || say "could not install ${missing[*]} (continuing without)"
fi

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    say "no dockerd on this machine; docker tests will skip"; exit 0
  fi
  say "starting dockerd (log: /tmp/dockerd.log)"
  $SUDO sh -c 'nohup dockerd > /tmp/dockerd.log 2>&1 &'
  for _ in $(seq "${DOCKERD_WAIT_S:-60}"); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not answer within ${DOCKERD_WAIT_S:-60} s; docker tests will skip. dockerd's last words:"
    tail -n 5 /tmp/dockerd.log 2>/dev/null | sed 's/^/    /'
    exit 0
  fi
fi
say "engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) answers"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "image $IMAGE present"
else
  say "building $IMAGE offline (debootstrap, about 2-4 minutes)"
  $SUDO "$PYTHON" -m mappa_cli sandbox build --image "$IMAGE" \
    || say "image build failed (see above); docker tests will skip"
fi
exit 0
