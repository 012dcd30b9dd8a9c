#!/usr/bin/env bash
# Builds nodesmith-agent_VERSION_ARCH.deb from the already-built agent, with dpkg-deb only.
#   packaging/deb/build-deb.sh AGENT_BINARY VERSION OUTPUT_DIR
# Runtime dependencies come from dpkg-shlibdeps (the libraries the binary links against, with the
# versions of the symbols it uses); nothing is downloaded.
set -euo pipefail
bin=$1 version=$2 out=$3
top=$(cd "$(dirname "$0")/../.." && pwd)
arch=$(dpkg --print-architecture)
pkg=nodesmith-agent
deb="$out/${pkg}_${version}_${arch}.deb"

work=$(mktemp -d "${TMPDIR:-/tmp}/nodesmith-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d" "$root/etc/nodesmith" \
  "$root/usr/share/doc/$pkg"
install -m 0755 "$bin" "$root/usr/bin/nodesmith-agent"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/nodesmith-agent"
install -m 0644 "$top/packaging/systemd/nodesmith-agent.service" "$root/lib/systemd/system/"
install -m 0644 "$top/packaging/systemd/nodesmith.sysusers" "$root/usr/lib/sysusers.d/nodesmith.conf"
install -m 0644 "$top/packaging/systemd/nodesmith.tmpfiles" "$root/usr/lib/tmpfiles.d/nodesmith.conf"
install -m 0600 "$top/packaging/etc/agent.conf" "$root/etc/nodesmith/agent.conf"
install -m 0644 "$top/docs/packaging.md" "$root/usr/share/doc/$pkg/packaging.md"
gzip -9n -c "$top/packaging/deb/changelog" > "$root/usr/share/doc/$pkg/changelog.gz"
install -m 0644 "$top/packaging/deb/copyright" "$root/usr/share/doc/$pkg/copyright"
for s in postinst prerm postrm; do
  install -m 0755 "$top/packaging/deb/$s" "$root/DEBIAN/$s"
done
echo /etc/nodesmith/agent.conf > "$root/DEBIAN/conffiles"

# dpkg-shlibdeps wants a debian/control beside it; give it a throwaway one.
mkdir -p "$work/src/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$pkg" "$pkg" > "$work/src/debian/control"
depends=$(cd "$work/src" && dpkg-shlibdeps -O "$root/usr/bin/nodesmith-agent" 2>/dev/null |
          sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@DEPENDS@/$depends/" \
    -e "s/@SIZE@/$size/" "$top/packaging/deb/control.in" > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
   xargs -0 md5sum) > "$root/DEBIAN/md5sums"

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
