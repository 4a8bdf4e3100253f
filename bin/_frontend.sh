# Sourced by bin/run and bin/test: bundle the AI SDK client for the demo chat page
# (frontend/ → helix_site/static/helix_site/vendor/ai.js) from the npm registry, when missing or stale.
. bin/_apt.sh
ensure_command node nodejs
ensure_command npm npm
bundle=helix_site/static/helix_site/vendor/ai.js
if [ ! -d frontend/node_modules ] || [ frontend/package-lock.json -nt frontend/node_modules ]; then
  (cd frontend && npm ci --no-audit --no-fund --loglevel=error)
  touch frontend/node_modules
fi
if [ ! -f "$bundle" ] || [ frontend/package-lock.json -nt "$bundle" ] || [ frontend/entry.js -nt "$bundle" ]; then
  (cd frontend && npm run --silent build >/dev/null)
fi
