#!/usr/bin/env bash
# System packages (outside pip) that the tests use. Quiet when everything is present.
#
# Each need is one line in main() below, either `soft` (missing: say so and go on) or `hard`
# (missing and cannot be installed: fail). Debian packages are installed when missing and we are
# root or have password-less sudo; `apt-get update` runs at most once, and only when an install
# is needed.
set -euo pipefail

log() { echo "system-deps: $*" >&2; }

APT_UPDATED=0
SUDO=""

# Can we install Debian packages? Sets SUDO to "" (root) or "sudo -n".
can_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        return 1
    fi
}

# Run a command quietly; show its output only if it fails.
quietly() {
    local out status=0
    out=$("$@" 2>&1) || status=$?
    [ "$status" -eq 0 ] || printf '%s\n' "$out" >&2
    return "$status"
}

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        quietly $SUDO apt-get update || return 1
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    quietly $SUDO apt-get install -y --no-install-recommends "$@"
}

# Report a missing need; fail for a hard one.
missing() {  # missing MODE MESSAGE...
    local mode=$1
    shift
    if [ "$mode" = hard ]; then
        log "ERROR: $*"
        exit 1
    fi
    log "note: $* (not required yet)"
}

# need_command MODE COMMAND DEBIAN_PACKAGE: install the package when COMMAND is missing.
need_command() {
    local mode=$1 cmd=$2 pkg=$3
    command -v "$cmd" >/dev/null 2>&1 && return 0
    if can_install && apt_install "$pkg" && command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    missing "$mode" "'$cmd' not found and Debian package '$pkg' could not be installed;" \
        "install it (apt-get install $pkg) and retry"
}

# The major version of the java on PATH (or JAVA_HOME), or nothing. "1.8.0_x" -> 8, "17.0.15" -> 17.
java_major() {
    local java=java
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
        java="$JAVA_HOME/bin/java"
    fi
    command -v "$java" >/dev/null 2>&1 || return 0
    "$java" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9._]*\).*/\1/p' | head -n1 |
        awk -F. '{ print ($1 == 1 ? $2 : $1) }'
}

# need_java MODE MIN_MAJOR: Spark (pyspark 4) needs Java 17 or newer.
need_java() {
    local mode=$1 min=$2 major
    major=$(java_major)
    if [ -n "$major" ] && [ "$major" -ge "$min" ]; then
        return 0
    fi
    if [ "$mode" = hard ] && can_install && apt_install "openjdk-${min}-jre-headless"; then
        major=$(java_major)
        [ -n "$major" ] && [ "$major" -ge "$min" ] && return 0
    fi
    missing "$mode" "Java >= $min not found (found: ${major:+Java }${major:-no java});" \
        "install openjdk-${min}-jre-headless or set JAVA_HOME"
}

main() {
    need_command hard redis-server redis-server  # Kestrel-style source on Redis Streams
    need_command hard chromium chromium          # widget tests in JupyterLab, headless
    need_command hard chromedriver chromium-driver
    need_java hard 17                            # PySpark bridge (workbench)
}

main "$@"
