# Sourced by the scripts that give a peer a venv of its own (flashbax-env.sh, reverb-env.sh).
# `kary_pinned_venv DIR LABEL PINS`: create the venv DIR outside the clone and install PINS
# (a space-separated pip list) into it, once: again only when PINS changed (DIR/.installed
# records them); then put its python first on PATH.
kary_pinned_venv() {
  local dir="$1" label="$2" pins="$3"
  if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$pins" ]; then
    echo "installing $label into $dir (once)"
    python3 -m venv "$dir"
    # shellcheck disable=SC2086
    "$dir/bin/pip" install -q $pins
    echo "$pins" >"$dir/.installed"
  fi
  export PATH="$dir/bin:$PATH"
}
