# Sourced by bin/test: install the pinned AI SDK clients of tests/js (npm ci from the lockfile).
. bin/_apt.sh
ensure_command node nodejs
ensure_command npm npm
if [ ! -d tests/js/node_modules ] || [ tests/js/package-lock.json -nt tests/js/node_modules ]; then
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
  touch tests/js/node_modules
fi
