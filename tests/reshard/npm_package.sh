#!/usr/bin/env bash
# Sourced by the setup_*.sh scripts: npm_package NAME VERSION CHECK [PRUNE] fetches the npm package NAME@VERSION once
# into <build>/reshard-cache/<NAME>-<VERSION>/node_modules/<NAME>, one fetch at a time (ctest -j), runs PRUNE PKG_DIR
# after unpacking if given, checks that `node -e CHECK` succeeds with $PKG set to the directory, and prints it.
npm_package() {
  local name=$1 version=$2 check=$3 prune=${4:-}
  mkdir -p "${CAIRN_BUILD_DIR:?}/reshard-cache"
  local cache pkg
  cache="$(cd "$CAIRN_BUILD_DIR/reshard-cache" && pwd)/$name-$version"
  pkg="$cache/node_modules/$name"
  exec 9>"$cache.lock"
  flock 9
  if [ ! -f "$pkg/package.json" ] || ! PKG="$pkg" node -e "$check" 2>/dev/null; then
    rm -rf "$cache"
    mkdir -p "$pkg"
    ( cd "$cache" && npm pack --silent "$name@$version" >/dev/null )
    tar -xzf "$cache/$name-$version.tgz" -C "$pkg" --strip-components=1
    rm -f "$cache/$name-$version.tgz"
    [ -z "$prune" ] || "$prune" "$pkg"
    PKG="$pkg" node -e "$check" || { echo "npm_package: $pkg does not load on this machine" >&2; return 1; }
  fi
  echo "$pkg"
}
