#!/bin/sh
# Make this machine ready for `make demo` and `make test`: the host packages below, and a Docker
# engine that answers. `make demo`, `make test` and `.ci/run` all run it first.
#
# On Debian or Ubuntu as root, it installs what is missing with apt-get (saying what and why) and
# starts the engine (through systemd or the service command when there is one, else dockerd in
# the background with its log path printed). Elsewhere it prints the one command to run and
# stops. On a ready machine it installs nothing and returns within a second or two.
#
#   scripts/bootstrap.sh              install what is missing, start the engine
#   scripts/bootstrap.sh --check      say what is missing; change nothing (exit 1 if anything is)
#   scripts/bootstrap.sh --packages   the host packages, one "name: why" a line
#   scripts/bootstrap.sh --no-engine  packages only (e.g. inside a container without dockerd)
set -eu

# One list: "Debian package|a command that proves it present elsewhere|why the project needs it".
PACKAGES='python3-venv|python3 -c "import ensurepip, venv"|make venv creates .venv with python3 -m venv
make|command -v make|the README verbs (make demo, make test)
git|command -v git|applying the patch series (git apply), release-check, cloning the canonical pin
ca-certificates|test -s /etc/ssl/certs/ca-certificates.crt|HTTPS to PyPI and the canonical source
docker.io|command -v dockerd|the Docker engine and the BuildKit-capable docker client for image builds
mmdebstrap|command -v mmdebstrap|the registry-free Debian base images (appliance image base)
util-linux-extra|command -v fincore|fincore checks page-cache residency of models before each trial
build-essential|command -v g++|local engine builds (appliance engine build --local) and the tracer tests
cmake|command -v cmake|local engine builds
ninja-build|command -v ninja|local engine builds
docker-registry|command -v docker-registry|the local registry the publish and pull tests push to on 127.0.0.1
docker-compose|command -v docker-compose|the compose.yaml test
chromium|command -v chromium|the browser test of appliance report (headless, offline)
shellcheck|command -v shellcheck|actionlint checks the shell steps of the release workflow with it (make lint and its test)'

ENGINE_LOG=${DOCKERD_LOG:-/var/log/appliance-dockerd.log}
ENGINE_WAIT_S=60

mode=install
case "${1:-}" in
    "") ;;
    --check) mode=check ;;
    --packages) printf '%s\n' "$PACKAGES" | awk -F'|' '{print $1 ": " $3}'; exit 0 ;;
    --no-engine) mode=packages ;;
    -h|--help) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown option $1 (see --help)" >&2; exit 2 ;;
esac

say() { echo "bootstrap: $*"; }
is_root() { [ "$(id -u)" = 0 ]; }
if [ -f /etc/debian_version ] && command -v apt-get >/dev/null && command -v dpkg-query >/dev/null; then
    debian=yes
else
    debian=no
fi
is_debian() { [ "$debian" = yes ]; }

installed() {
    dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# On Debian a package is present when dpkg has it; elsewhere (and for Docker's own packages,
# which provide dockerd and docker-compose under other names) when its probe succeeds.
missing_packages() {
    printf '%s\n' "$PACKAGES" | while IFS='|' read -r name probe _; do
        if is_debian && installed "$name"; then continue; fi
        if sh -c "$probe" >/dev/null 2>&1; then continue; fi
        printf '%s ' "$name"
    done
}

why() {
    printf '%s\n' "$PACKAGES" | awk -F'|' -v name="$1" '$1 == name {print $3}'
}

python_ok() {
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

ensure_packages() {
    missing=$(missing_packages)
    if [ -z "$missing" ]; then
        return 0
    fi
    if ! is_debian; then
        say "missing: $missing(Debian package names; see --packages for what each is for)"
        say "install their equivalents with this system's package manager, then run make again"
        exit 1
    fi
    if [ "$mode" = check ] || ! is_root; then
        say "missing host packages: $missing"
        if [ "$mode" != check ]; then
            say "run: sudo apt-get update && sudo apt-get install -y --no-install-recommends $missing"
        fi
        exit 1
    fi
    for name in $missing; do
        say "installing $name: $(why "$name")"
    done
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086 # one word per package
    apt-get install -y -q --no-install-recommends $missing
    still=$(missing_packages)
    if [ -n "$still" ]; then
        say "apt-get finished but these are still not installed: $still"
        exit 1
    fi
}

engine_answers() {
    timeout 10 docker info >/dev/null 2>&1
}

start_dockerd() {
    say "starting dockerd in the background; its log: $ENGINE_LOG"
    mkdir -p "$(dirname "$ENGINE_LOG")"
    nohup dockerd >>"$ENGINE_LOG" 2>&1 &
}

wait_for_engine() {
    waited=0
    until engine_answers; do
        if [ "$waited" -ge "$1" ]; then
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

# A service manager is tried first; where it refuses (a container or sandbox without systemd,
# an init script that cannot raise ulimits) dockerd is started directly.
start_engine() {
    managed=no
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
        say "starting the Docker engine: systemctl start docker"
        systemctl start docker && managed=yes
    elif command -v service >/dev/null && [ -x /etc/init.d/docker ]; then
        say "starting the Docker engine: service docker start"
        service docker start >/dev/null 2>&1 && managed=yes
    fi
    if [ "$managed" = yes ] && wait_for_engine 15; then
        :
    else
        if [ "$managed" = no ]; then
            say "the service manager did not start it (or there is none)"
        else
            say "the service manager started it but it does not answer"
        fi
        start_dockerd
        if ! wait_for_engine "$ENGINE_WAIT_S"; then
            say "the Docker engine did not answer within ${ENGINE_WAIT_S} s; last lines of $ENGINE_LOG:"
            tail -n 20 "$ENGINE_LOG" 2>/dev/null || true
            exit 1
        fi
    fi
    say "Docker engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) answers"
}

ensure_engine() {
    if engine_answers; then
        return 0
    fi
    if [ "$mode" = check ]; then
        say "no Docker engine answers"
        exit 1
    fi
    if ! is_root; then
        if docker info 2>&1 | grep -q 'permission denied'; then
            say "the Docker engine refuses this user: run: sudo usermod -aG docker $(id -un) (then log in again)"
        else
            say "no Docker engine answers: run: sudo systemctl start docker"
        fi
        exit 1
    fi
    start_engine
}

ensure_packages
if ! python_ok; then
    say "python3 is $(python3 -V 2>&1 || echo missing); the appliance needs Python 3.11 or newer"
    exit 1
fi
if [ "$mode" != packages ]; then
    ensure_engine
fi
count=$(printf '%s\n' "$PACKAGES" | wc -l)
if [ "$mode" = packages ]; then
    say "ready: all $count host packages are installed"
else
    say "ready: all $count host packages are installed and the Docker engine answers"
fi
