# Sourced by bin/run and bin/test: build the demo site's browser code from the npm registry, when
# missing or stale:
# - the AI SDK bundle of the framework-free chat page (frontend/entry.js → vendor/ai.js);
# - the npm package @helix-django/chat (clients/chat), packed as for a registry, and unpacked into
#   frontend/node_modules as npm installs a tarball;
# - the React chat page and the README's React example (its ```jsx block, as a reader copies it),
#   built with Vite on that package, once on ai 6 and once on ai 7
#   (frontend/react-page, frontend/readme-page → vendor/react-ai6/, vendor/react-ai7/).
. bin/_apt.sh
ensure_command node nodejs
ensure_command npm npm
vendor=helix_site/static/helix_site/vendor

npm_ci() {  # $1: a directory with a package-lock.json
  if [ ! -d "$1/node_modules" ] || [ "$1/package-lock.json" -nt "$1/node_modules" ]; then
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$1/node_modules"
  fi
}

# Whether $1 is missing or older than any of the other files (or files under directories) given.
stale() {
  local target="$1"
  shift
  [ ! -e "$target" ] || [ -n "$(find "$@" -name node_modules -prune -o -newer "$target" -type f -print -quit)" ]
}

npm_ci frontend
if stale "$vendor/ai.js" frontend/package-lock.json frontend/entry.js; then
  (cd frontend && npm run --silent build >/dev/null)
fi

npm_ci clients/chat
package=frontend/node_modules/@helix-django/chat
if stale "$package/.unpacked" clients/chat/src clients/chat/package.json clients/chat/tsconfig.json \
    clients/chat/scripts chat/static/helix/helix-chat.js frontend/package-lock.json; then
  packed=$(mktemp -d)
  (cd clients/chat && npm pack --silent --pack-destination "$packed" >/dev/null)
  rm -rf "$package" && mkdir -p "$package"
  tar -xzf "$packed"/*.tgz -C "$package" --strip-components=1
  rm -rf "$packed"
  touch "$package/.unpacked"  # npm's tarballs date every file 1985
fi
example=frontend/readme-page/Chat.jsx
if stale "$example" README.md; then
  awk '/^```jsx$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' README.md > "$example"
fi
if stale "$vendor/react-ai7/chat.js" "$package/.unpacked" frontend/react-page frontend/readme-page \
    frontend/vite.config.js frontend/package-lock.json; then
  (cd frontend && npm run --silent build:react)
fi
