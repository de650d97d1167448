#!/usr/bin/env bash
# Installs or upgrades the panel on a Linux host: the one-file binary, its systemd unit,
# the data directory and the core (Xray) from a release whose SHA-256 is checked.
#
#   install.sh [options]
#
#   --root DIR          install under DIR instead of / (env DESTDIR); no systemctl then
#   --binary SRC        the panel binary: a path or an http(s) URL (env APPLIANCE_BINARY;
#                       default: `appliance` beside this script, else dist/appliance)
#   --binary-sha256 HEX expected SHA-256 of a downloaded binary (default: SRC.sha256)
#   --unit FILE         the unit file (default: appliance.service beside this script,
#                       else systemd/appliance.service)
#   --core-url URL      the core release zip (env APPLIANCE_CORE_URL; default Xray's latest
#                       for this machine); its SHA-256 comes from --core-sha256 or URL.dgst
#   --core-sha256 HEX   expected SHA-256 of the core zip (env APPLIANCE_CORE_SHA256)
#   --no-core           install no core (use one already on PATH)
#   --no-systemctl      do not call systemctl (env APPLIANCE_NO_SYSTEMCTL=1)
#
# Files: /usr/local/lib/appliance/appliance (linked from /usr/local/bin/appliance), the
# unit /etc/systemd/system/appliance.service, data and core in /var/lib/appliance.
# A first install creates an admin with a random username and password, a random panel
# port and URL path, and prints them once. Running it again replaces the binary and the
# unit (the previous binary is kept as appliance.previous), keeps the data, credentials
# and the installed core (unless --core-url is given), and restarts the service.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="${DESTDIR:-}"
binary_src="${APPLIANCE_BINARY:-}"
binary_sha256=""
unit_src=""
core_url="${APPLIANCE_CORE_URL:-}"
core_sha256="${APPLIANCE_CORE_SHA256:-}"
core_wanted=1
use_systemctl=1
[ -n "${APPLIANCE_NO_SYSTEMCTL:-}" ] && use_systemctl=0

die() {
    echo "install.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="${2:?--root needs a directory}"; shift 2 ;;
        --binary) binary_src="${2:?--binary needs a path or URL}"; shift 2 ;;
        --binary-sha256) binary_sha256="${2:?--binary-sha256 needs a digest}"; shift 2 ;;
        --unit) unit_src="${2:?--unit needs a file}"; shift 2 ;;
        --core-url) core_url="${2:?--core-url needs a URL}"; shift 2 ;;
        --core-sha256) core_sha256="${2:?--core-sha256 needs a digest}"; shift 2 ;;
        --no-core) core_wanted=0; shift ;;
        --no-systemctl) use_systemctl=0; shift ;;
        -h|--help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

# The binary lives in a directory of its own, which the unit lets the panel write to
# (it updates itself there); /usr/local/bin/appliance is a relative link to it.
root="${root%/}"
bin_dir="$root/usr/local/bin"
lib_dir="$root/usr/local/lib/appliance"
unit_dir="$root/etc/systemd/system"
data_dir="$root/var/lib/appliance"
core_bin_dir="$data_dir/core/bin"
binary="$lib_dir/appliance"
command_link="$bin_dir/appliance"

# systemctl only for the live system: never for a staging root, a container without
# systemd, or when told not to.
if [ -n "$root" ] || [ ! -d /run/systemd/system ] || ! command -v systemctl >/dev/null; then
    use_systemctl=0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ---- helpers ------------------------------------------------------------------------------

fetch() {  # fetch URL FILE: download, failing on any HTTP error
    if command -v curl >/dev/null; then
        curl --fail --silent --show-error --location --retry 2 --max-time 600 -o "$2" "$1"
    elif command -v wget >/dev/null; then
        wget --quiet --tries=3 --timeout=60 -O "$2" "$1"
    else
        die "downloading $1 needs curl or wget"
    fi
}

is_url() {
    case "$1" in http://*|https://*) return 0 ;; *) return 1 ;; esac
}

sha256_of() {
    sha256sum "$1" | cut -d' ' -f1
}

check_sha256() {  # check_sha256 FILE EXPECTED LABEL
    local actual expected
    actual="$(sha256_of "$1")"
    expected="$(printf '%s' "$2" | tr 'A-F' 'a-f')"
    if [ "$actual" != "$expected" ]; then
        die "the SHA-256 of $3 ($actual) does not match the published one ($expected); nothing was installed"
    fi
}

unzip_to() {  # unzip_to ZIP DIR MEMBER...: extract the named members that exist
    local archive="$1" dest="$2"
    shift 2
    if command -v unzip >/dev/null; then
        unzip -o -q "$archive" "$@" -d "$dest" 2>/dev/null || [ -f "$dest/$1" ]
    elif command -v python3 >/dev/null; then
        python3 - "$archive" "$dest" "$@" <<'PY'
import sys, zipfile
archive, dest, *wanted = sys.argv[1:]
with zipfile.ZipFile(archive) as bundle:
    names = set(bundle.namelist())
    for name in wanted:
        if name in names:
            bundle.extract(name, dest)
PY
    else
        die "unpacking the core needs unzip (apt-get install unzip) or python3"
    fi
}

random_text() {  # random_text LENGTH ALPHABET (tr ends on SIGPIPE once head has enough)
    LC_ALL=C tr -dc "$2" </dev/urandom 2>/dev/null | head -c "$1" || true
}

port_taken() {
    command -v ss >/dev/null && ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

random_port() {
    local port
    while :; do
        port=$((10000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 50000))
        port_taken "$port" || break
    done
    echo "$port"
}

# The panel's offline commands against the installed data directory; variables of the
# caller's shell must not point them at another database. `exec`, so that a panel started
# in the background has the PID the script waits for and stops.
panel() {
    exec env -u APPLIANCE_DB -u APPLIANCE_PORT -u APPLIANCE_SUB_PORT -u APPLIANCE_LISTEN \
        APPLIANCE_DATA_DIR="$data_dir" APPLIANCE_CORE=/nonexistent/core "$binary" "$@"
}

# ---- the binary -----------------------------------------------------------------------------

if [ -z "$binary_src" ]; then
    for candidate in "$here/appliance" "$here/../dist/appliance"; do
        if [ -f "$candidate" ]; then
            binary_src="$candidate"
            break
        fi
    done
    [ -n "$binary_src" ] || die "no panel binary beside this script or in dist/; give --binary"
fi
new_binary="$work/appliance"
if is_url "$binary_src"; then
    fetch "$binary_src" "$new_binary" || die "downloading the panel binary from $binary_src failed"
    if [ -z "$binary_sha256" ]; then
        fetch "$binary_src.sha256" "$work/appliance.sha256" ||
            die "no checksum for $binary_src (tried $binary_src.sha256); give --binary-sha256"
        binary_sha256="$(cut -d' ' -f1 <"$work/appliance.sha256")"
    fi
else
    [ -f "$binary_src" ] || die "no panel binary at $binary_src"
    cp "$binary_src" "$new_binary"
fi
[ -z "$binary_sha256" ] || check_sha256 "$new_binary" "$binary_sha256" "the panel binary"
chmod 0755 "$new_binary"
new_version="$("$new_binary" version)" || die "the panel binary $binary_src does not run on this machine"

if [ -z "$unit_src" ]; then
    for candidate in "$here/appliance.service" "$here/../systemd/appliance.service"; do
        if [ -f "$candidate" ]; then
            unit_src="$candidate"
            break
        fi
    done
    [ -n "$unit_src" ] || die "no appliance.service beside this script or in systemd/; give --unit"
fi

# ---- the core -------------------------------------------------------------------------------

install_core=0
if [ "$core_wanted" = 1 ] && { [ -n "$core_url" ] || [ ! -x "$core_bin_dir/xray" ]; }; then
    install_core=1
fi
if [ "$install_core" = 1 ]; then
    if [ -z "$core_url" ]; then
        case "$(uname -m)" in
            x86_64|amd64) asset=64 ;;
            aarch64|arm64) asset=arm64-v8a ;;
            armv7l) asset=arm32-v7a ;;
            i386|i686) asset=32 ;;
            *) die "no Xray build known for $(uname -m); install a core by hand and use --no-core" ;;
        esac
        core_url="https://github.com/XTLS/Xray-core/releases/latest/download/Xray-linux-$asset.zip"
    fi
    is_url "$core_url" || die "--core-url must be an http(s) URL (got $core_url)"
    fetch "$core_url" "$work/core.zip" || die "downloading the core from $core_url failed"
    if [ -z "$core_sha256" ]; then
        fetch "$core_url.dgst" "$work/core.dgst" ||
            die "no checksum for $core_url (tried $core_url.dgst); give --core-sha256"
        # Xray's .dgst lists several digests, one `SHA2-256= HEX` (or `SHA256= HEX`) line.
        core_sha256="$(sed -n 's/^SHA2\{0,1\}-\{0,1\}256[^=]*=[[:space:]]*\([0-9a-fA-F]\{64\}\).*/\1/p' \
            "$work/core.dgst" | head -n1)"
        [ -n "$core_sha256" ] || die "$core_url.dgst holds no SHA-256; an unverified core is not installed"
    fi
    check_sha256 "$work/core.zip" "$core_sha256" "the core release $core_url"
    mkdir -p "$work/core"
    unzip_to "$work/core.zip" "$work/core" xray geoip.dat geosite.dat
    [ -f "$work/core/xray" ] || die "$core_url holds no 'xray' binary; nothing was installed"
    chmod 0755 "$work/core/xray"
    "$work/core/xray" version >/dev/null 2>&1 || "$work/core/xray" -version >/dev/null 2>&1 ||
        die "the core from $core_url does not run on this machine; nothing was installed"
fi

# ---- files in place ----------------------------------------------------------------------------

fresh=1
[ -f "$data_dir/appliance.db" ] && fresh=0

if [ "$use_systemctl" = 1 ] && systemctl is-active --quiet appliance; then
    systemctl stop appliance
fi

mkdir -p "$bin_dir" "$unit_dir"
install -d -m 0755 "$lib_dir"
install -d -m 0700 "$data_dir"
if [ -f "$binary" ]; then
    cp -p "$binary" "$binary.previous"
fi
install -m 0755 "$new_binary" "$binary.new"
mv -f "$binary.new" "$binary"
ln -sfn ../lib/appliance/appliance "$command_link"
install -m 0644 "$unit_src" "$unit_dir/appliance.service.new"
mv -f "$unit_dir/appliance.service.new" "$unit_dir/appliance.service"

if [ "$install_core" = 1 ]; then
    install -d -m 0755 "$core_bin_dir"
    for name in geoip.dat geosite.dat xray; do
        if [ -f "$work/core/$name" ]; then
            install -m 0644 "$work/core/$name" "$core_bin_dir/$name.new"
            mv -f "$core_bin_dir/$name.new" "$core_bin_dir/$name"
        fi
    done
    chmod 0755 "$core_bin_dir/xray"
fi

# ---- a first install: the database, an admin, a port and a path only its owner knows -------------

if [ "$fresh" = 1 ]; then
    # One start on loopback creates and migrates the database, the admin and the panel's
    # identity exactly as `appliance run` always does; it stops as soon as it answers.
    log="$work/first-run.log"
    (panel run --listen 127.0.0.1 --port 0 --sub-port 0 >"$log" 2>&1) &
    first_run=$!
    for _ in $(seq 1 300); do
        grep -q "password:" "$log" && break
        kill -0 "$first_run" 2>/dev/null || break
        sleep 0.1
    done
    kill "$first_run" 2>/dev/null || true
    wait "$first_run" 2>/dev/null || true
    grep -q "password:" "$log" || die "the panel did not start to create its database:
$(cat "$log")"

    username="admin-$(random_text 6 'a-z0-9')"
    password="$(random_text 20 'A-Za-z0-9')"
    base_path="/$(random_text 12 'a-z0-9')/"
    port="$(random_port)"
    (panel admin reset --username "$username" --password "$password" >/dev/null)
    (panel setting set --port "$port" --base-path "$base_path" >/dev/null)
fi

if [ "$use_systemctl" = 1 ]; then
    systemctl daemon-reload
    systemctl enable --quiet appliance
    systemctl restart appliance
fi

# ---- report ---------------------------------------------------------------------------------

echo "appliance $new_version installed: $command_link -> $binary"
echo "  unit: $unit_dir/appliance.service"
echo "  data: $data_dir"
if [ "$install_core" = 1 ]; then
    echo "  core: $core_bin_dir/xray (from $core_url, SHA-256 verified)"
fi
if [ "$use_systemctl" = 0 ]; then
    echo "  systemctl was not called: start it with \`systemctl daemon-reload && systemctl enable --now appliance\`"
fi
if [ "$fresh" = 1 ]; then
    host="$(hostname -I 2>/dev/null | cut -d' ' -f1)"
    line="============================================================"
    echo "$line"
    echo "Sign in to the panel (shown this once; \`appliance admin reset\` makes new ones):"
    echo "  url:      http://${host:-SERVER-ADDRESS}:$port$base_path"
    echo "  username: $username"
    echo "  password: $password"
    echo "  port:     $port"
    echo "  path:     $base_path"
    echo "$line"
else
    echo "upgraded in place; data and credentials kept (previous binary: $binary.previous)"
fi
