# Sourced by bin/test and bin/bench: start a throwaway Redis server on a free loopback port,
# export its URL as THROWAWAY_REDIS_URL, and stop it when the calling script exits.
. bin/_apt.sh
ensure_command redis-server redis-server
redis_port=$("${VENV:-.venv}/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis_dir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$redis_dir" --save "" --appendonly no \
  --daemonize no --logfile "$redis_dir/redis.log" &
redis_pid=$!
stop_redis() { kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; rm -rf "$redis_dir"; }
trap stop_redis EXIT
for _ in $(seq 1 50); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
export THROWAWAY_REDIS_URL="redis://127.0.0.1:$redis_port/0"
