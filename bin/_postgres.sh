# Sourced by bin/test: start a throwaway PostgreSQL server (Debian's package) on a free loopback
# port, export its URL as THROWAWAY_DATABASE_URL, and stop it when the calling script exits.
# Durability is off (fsync, synchronous_commit): the data lives only as long as the tests.
. bin/_apt.sh
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
  ensure_command /usr/lib/postgresql/15/bin/initdb postgresql
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
pg_port=$("${VENV:-.venv}/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pg_dir=$(mktemp -d)
pg_run=()
if [ "$(id -u)" -eq 0 ]; then  # PostgreSQL refuses to run as root: use the package's user
  chown postgres "$pg_dir"
  pg_run=(runuser -u postgres --)
fi
"${pg_run[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
"${pg_run[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/postgres.log" -w -s start \
  -o "-h 127.0.0.1 -p $pg_port -k $pg_dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
stop_postgres() { "${pg_run[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -s stop 2>/dev/null || true; rm -rf "$pg_dir"; }
export THROWAWAY_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/helix"
export THROWAWAY_PG_BIN="$pg_bin" THROWAWAY_PG_DATA="$pg_dir/data"
