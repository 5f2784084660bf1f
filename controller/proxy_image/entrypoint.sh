#!/bin/sh
# Write the configuration the controller generated to the tmpfs at /run/squid and run squid in
# the foreground. The root filesystem is read-only; /run/squid is the only place squid writes.
set -eu
umask 077
printf '%s\n' "${CUBICLE_SQUID_CONF:?the controller passes the configuration in CUBICLE_SQUID_CONF}" >/run/squid/squid.conf
unset CUBICLE_SQUID_CONF
exec /usr/sbin/squid -N -f /run/squid/squid.conf
