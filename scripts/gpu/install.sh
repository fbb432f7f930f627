#!/usr/bin/env bash
# scripts/gpu/install.sh PARTS_DIR [SITE_DIR]
#
# Runs ON THE DEVICE (box.sh calls it first in every call). Copies the parts
# of the pack (scripts/gpu/pack.sh) that this call carried to /tmp/at-parts,
# which outlives the call while the machine stays warm; once every part listed
# in at-site.nparts is there, checks the sha256 and unpacks them into SITE_DIR
# (default /tmp/at-site). Prints one line and exits 0:
#   INSTALLED <dir> (already|in N s)   ready
#   STASHED k/n (missing: ...)         carry the missing parts in the next call
# Exits 3 when nothing was ever carried to this machine (a fresh machine: start
# again with the first part), non-zero on a checksum or unpack error.
set -euo pipefail
PARTS=${1:?usage: install.sh PARTS_DIR [SITE_DIR]}
SITE=${2:-/tmp/at-site}
STASH=/tmp/at-parts
mkdir -p "$STASH"
shopt -s nullglob

# a newer pack (another checksum) replaces an older install
if [ -f "$PARTS/at-site.sha256" ] && [ -f "$SITE/.at-site-ok" ] \
   && ! cmp -s "$PARTS/at-site.sha256" "$SITE/.at-site-ok"; then
  if [ -f "$STASH/at-site.sha256" ] && ! cmp -s "$PARTS/at-site.sha256" "$STASH/at-site.sha256"; then
    rm -f "$STASH"/at-site.*
  fi
  rm -rf "$SITE"
fi
if [ -f "$SITE/.at-site-ok" ]; then
  echo "INSTALLED $SITE (already)"; exit 0
fi
for f in "$PARTS"/at-site.tar.xz.part* "$PARTS"/at-site.sha256 "$PARTS"/at-site.nparts; do
  [ -f "$f" ] && cp -f "$f" "$STASH/"
done
if [ ! -f "$STASH/at-site.nparts" ]; then
  echo "NOTHING-CARRIED: no pack on this machine (a fresh one): carry part00 and the two" \
       "small files (scripts/gpu/README.md, call A)" >&2
  exit 3
fi
n=$(cat "$STASH/at-site.nparts")
missing=()
for ((i = 0; i < n; i++)); do
  p=$(printf 'at-site.tar.xz.part%02d' "$i")
  [ -f "$STASH/$p" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "STASHED $(( n - ${#missing[@]} ))/$n (missing: ${missing[*]})"; exit 0
fi
t0=$(date +%s)
( cd "$STASH" && cat at-site.tar.xz.part* > /tmp/at-site.tar.xz )
( cd /tmp && sha256sum -c --quiet "$STASH/at-site.sha256" )
rm -rf "$SITE"; mkdir -p "$(dirname "$SITE")"
tmpd=$(mktemp -d /tmp/at-unpack.XXXX)
if command -v xz >/dev/null; then
  xz -dc -T0 /tmp/at-site.tar.xz | tar -C "$tmpd" -xf -
else
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1],'r:xz').extractall(sys.argv[2])" \
    /tmp/at-site.tar.xz "$tmpd"
fi
mv "$tmpd/site" "$SITE"; rmdir "$tmpd"
rm -f /tmp/at-site.tar.xz
cp "$STASH/at-site.sha256" "$SITE/.at-site-ok"
echo "INSTALLED $SITE in $(( $(date +%s) - t0 )) s ($(du -sh "$SITE" | cut -f1))"
