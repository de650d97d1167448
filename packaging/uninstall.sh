#!/usr/bin/env bash
# Removes the panel's service and binary; the data directory (database, core, logs) stays
# unless --purge is given.
#
#   uninstall.sh [--root DIR] [--purge] [--no-systemctl]
#
#   --root DIR      the root the panel was installed under (env DESTDIR; default /)
#   --purge         also delete /var/lib/appliance: every inbound, client and credential
#   --no-systemctl  do not call systemctl (env APPLIANCE_NO_SYSTEMCTL=1)
set -euo pipefail

root="${DESTDIR:-}"
purge=0
use_systemctl=1
[ -n "${APPLIANCE_NO_SYSTEMCTL:-}" ] && use_systemctl=0

while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="${2:?--root needs a directory}"; shift 2 ;;
        --purge) purge=1; shift ;;
        --no-systemctl) use_systemctl=0; shift ;;
        -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "uninstall.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
done

root="${root%/}"
unit="$root/etc/systemd/system/appliance.service"
command_link="$root/usr/local/bin/appliance"
lib_dir="$root/usr/local/lib/appliance"
data_dir="$root/var/lib/appliance"
if [ -n "$root" ] || [ ! -d /run/systemd/system ] || ! command -v systemctl >/dev/null; then
    use_systemctl=0
fi

if [ "$use_systemctl" = 1 ] && [ -f "$unit" ]; then
    systemctl disable --now --quiet appliance || true
fi
rm -f "$unit" "$command_link"
rm -rf "$lib_dir"
if [ "$use_systemctl" = 1 ]; then
    systemctl daemon-reload
fi
echo "removed $command_link, $lib_dir and $unit"

if [ "$purge" = 1 ]; then
    rm -rf "$data_dir"
    echo "removed $data_dir"
elif [ -d "$data_dir" ]; then
    echo "kept $data_dir (database, core, logs); --purge removes it"
fi
