#!/bin/bash
# ==========================================================================================
#  STAND-IN for the Huawei Ascend HDK @KIND@ package @NAME@
#  Made by the a3rl simulator (tools/a3rl/sim/standins.py). NOT vendor software: it installs
#  placeholders and the stand-in npu-smi. Options and messages follow the vendor package.
# ==========================================================================================
# Layout of the vendor's makeself archives: this header, then the payload (a gzip'd tar,
# base64 here so the file stays text) whose SHA-256 is checked before anything runs.
A3RL_LABEL='@LABEL@'
A3RL_VERSION='@VERSION@'
A3RL_SHA256='@SHA256@'
A3RL_SKIP=@SKIP@
set -u
runfile=$0
quiet=n check=n help=n info=n list=n noexec=n extract= nox11=n
args=()
for a in "$@"; do
    case "$a" in
        --check) check=y ;;
        -h|--help) help=y ;;
        --info) info=y ;;
        --list) list=y ;;
        --noexec) noexec=y ;;
        --extract=*) extract=${a#*=} ;;
        --nox11) nox11=y ;;
        -q|--quiet) quiet=y; args+=(--quiet) ;;
        *) args+=("$a") ;;
    esac
done
payload() { tail -n +"$A3RL_SKIP" "$runfile"; }
# makeself without --nox11: no tty and DISPLAY set -> it tries to re-run itself in an
# xterm. What follows on a real node depends on the X server and the terminals there
# (not modelled); the stand-in stops with exit 1 so a call without --nox11 fails.
if [ "$nox11" = n ] && ! tty -s 2>/dev/null && [ -n "${DISPLAY:-}" ]; then
    echo "a3rl stand-in: DISPLAY=$DISPLAY is set, there is no tty and --nox11 was not given:"         "a makeself archive would try to open an xterm here. Pass --nox11." >&2
    exit 1
fi
verify() {
    local sum
    sum=$(payload | sha256sum | cut -d' ' -f1)
    if [ "$sum" != "$A3RL_SHA256" ]; then
        echo "Verifying archive integrity..."
        echo "Error in SHA256 checksums: $sum is different from $A3RL_SHA256" >&2
        exit 2
    fi
    [ "$quiet" = y ] || echo "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."
}
if [ "$help" = y ]; then
    cat <<EOF
$A3RL_LABEL $A3RL_VERSION (a3rl simulator STAND-IN)
Usage: ./$(basename "$runfile") [options]
  --help | -h             this help
  --info | --list         archive identification | file list
  --check                 verify the archive checksum only
  --noexec --extract=DIR  unpack into DIR without installing
  --quiet                 never ask (the stand-in never waits on stdin either)
  --full                  install the @KIND@; --upgrade upgrade; --uninstall remove
  --version               version of this package
  --install-for-all, --install-path=DIR, --install-username=U --install-usergroup=G
EOF
    exit 0
fi
if [ "$info" = y ]; then
    printf 'Identification: %s\nVersion: %s\nCompression: gzip (base64)\n' \
        "$A3RL_LABEL" "$A3RL_VERSION"
    echo "Note: a3rl simulator stand-in, not vendor software"
    exit 0
fi
verify
[ "$check" = y ] && exit 0
if [ "$list" = y ]; then payload | base64 -d | tar -tzvf -; exit $?; fi
if [ "$noexec" = y ] || [ -n "$extract" ]; then
    [ -n "$extract" ] || { echo "--noexec needs --extract=<path>" >&2; exit 1; }
    mkdir -p "$extract" && payload | base64 -d | tar -xzf - -C "$extract"
    exit $?
fi
[ "$quiet" = y ] || echo "Uncompressing $A3RL_LABEL  100%"
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/a3rl-standin.XXXXXX") || exit 1
trap 'rm -rf "$tmpdir"' EXIT
payload | base64 -d | tar -xzf - -C "$tmpdir" || { echo "cannot unpack $runfile" >&2; exit 1; }
(cd "$tmpdir" && bash ./install.sh "$(basename "$runfile")" "${args[@]}")
exit $?
