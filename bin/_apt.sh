# Sourced by the bin/ scripts: ensure_command COMMAND PACKAGE installs PACKAGE from apt when
# COMMAND is not on PATH.
ensure_command() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "$1 not found: installing $2 from apt" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
}
