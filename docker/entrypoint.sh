#!/bin/sh
# Entry point of the Strata image (PID 1 is tini, which runs this script and forwards signals).
#
#   (no arguments)             strata serve with the settings below
#   --opt ...                  strata serve with the settings below, then these options
#                              (they come last, so e.g. --port or --set KEY=VALUE win)
#   COMMAND ...                run COMMAND instead: `strata topics list ...`, `sh`, ...
#
# Settings (environment):
#   STRATA_DATA_DIR  data directory (the volume)            default /var/lib/strata
#   STRATA_CONFIG    broker properties file                  default /etc/strata/server.properties
#                    (the default is skipped when absent; a file named explicitly must exist)
#   STRATA_PORT      native protocol port, on 0.0.0.0        default 9000
#   STRATA_JAAS_FILE a mounted JAAS file (Kafka's `KafkaServer { ... };` form, or the one
#                    sasl.jaas.config line): its login module line becomes sasl.jaas.config
#                    (PLAIN users: user_<name>="<password>"), so passwords stay out of the
#                    environment and the command line
#   STRATA_SCRAM_USERS_FILE a mounted file of SCRAM users, one Kafka `--add-scram` argument a
#                    line (`SCRAM-SHA-512=[name=alice,password=alice-secret]`, as kafka-storage
#                    format takes it; `#` comments): written salted and hashed into the data
#                    directory before the broker starts (`strata users set --data-dir`), each
#                    start, so a changed file changes those users' passwords
#   KAFKA_ADVERTISED_LISTENERS   taken as STRATA_ADVERTISED_LISTENERS (advertised.listeners,
#                    what Kafka clients are told to connect to) when that is not set, as in
#                    Kafka's own image
#
# The data directory must be writable by the user the container runs as (uid 10001 by
# default). A bind mount keeps the host directory's owner; when it is not writable the
# entry point says so, naming the directory and the uids, instead of the broker's bare
# "Permission denied".
# Broker settings themselves come from the properties file and from STRATA_<KEY> variables
# (e.g. STRATA_NUM_PARTITIONS=3 for num.partitions), which the broker reads itself.
#
# Every path ends in `exec`, so the broker (or the command) replaces this shell and receives
# SIGTERM/SIGINT directly: `docker stop` gives it a graceful shutdown.
set -eu

# A first argument that is not an option is a command of its own.
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi

data_dir=${STRATA_DATA_DIR:-/var/lib/strata}
port=${STRATA_PORT:-9000}
if [ -n "${STRATA_CONFIG:-}" ]; then
  config=$STRATA_CONFIG
  if [ ! -f "$config" ]; then
    echo "strata-entrypoint: STRATA_CONFIG=$config: no such file" >&2
    exit 2
  fi
else
  config=/etc/strata/server.properties
  [ -f "$config" ] || config=
fi

if [ -z "${STRATA_ADVERTISED_LISTENERS:-}" ] && [ -n "${KAFKA_ADVERTISED_LISTENERS:-}" ]; then
  STRATA_ADVERTISED_LISTENERS=$KAFKA_ADVERTISED_LISTENERS
  export STRATA_ADVERTISED_LISTENERS
fi

if [ -n "${STRATA_JAAS_FILE:-}" ]; then
  if [ ! -r "$STRATA_JAAS_FILE" ]; then
    echo "strata-entrypoint: STRATA_JAAS_FILE=$STRATA_JAAS_FILE: cannot read it" >&2
    exit 2
  fi
  # One line: the login module entry, without a `Section { ... };` wrapper.
  STRATA_SASL_JAAS_CONFIG=$(tr '\n' ' ' < "$STRATA_JAAS_FILE" \
    | sed -e 's/^[^{"]*{//' -e 's/}[[:space:]]*;[[:space:]]*$//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
  export STRATA_SASL_JAAS_CONFIG
fi

if [ -d "$data_dir" ] && { [ ! -w "$data_dir" ] || [ ! -x "$data_dir" ]; }; then
  uid=$(id -u)
  gid=$(id -g)
  owner=$(stat -c '%u:%g' "$data_dir" 2>/dev/null || echo unknown)
  echo "strata-entrypoint: the data directory $data_dir is not writable by uid $uid (gid $gid);" \
    "it is owned by uid:gid $owner. For a bind mount, on the host: chown -R $uid:$gid <the directory>," \
    "or run the container as its owner (docker run --user $owner)." >&2
  exit 2
fi

if [ -n "${STRATA_SCRAM_USERS_FILE:-}" ]; then
  if [ ! -r "$STRATA_SCRAM_USERS_FILE" ]; then
    echo "strata-entrypoint: STRATA_SCRAM_USERS_FILE=$STRATA_SCRAM_USERS_FILE: cannot read it" >&2
    exit 2
  fi
  strata users set --data-dir "$data_dir" --add-scram-file "$STRATA_SCRAM_USERS_FILE" >&2
fi

# These are the entry point's own settings, not broker keys: keep them out of the
# broker's STRATA_* overrides.
unset STRATA_DATA_DIR STRATA_CONFIG STRATA_PORT STRATA_JAAS_FILE STRATA_SCRAM_USERS_FILE

# Rebuild the argument list: our options first, the caller's options (still in "$@") last.
if [ -n "$config" ]; then
  set -- --config "$config" "$@"
fi
set -- serve --data-dir "$data_dir" --host 0.0.0.0 --port "$port" "$@"
exec strata "$@"
