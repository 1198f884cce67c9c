#!/usr/bin/env bash
# .gitbundle/shallow.tgz for tools/device/bench.sh: the .git of a depth-1 clone of HEAD (asv labels
# its results with that commit; the device's copy of the tree has no usable .git). Partial and
# sparse so the call stays under the device's 64 MiB: blobs over 100 kB are left out, and the
# checkout there skips them, reports/ and docs/ (asv needs none), so no missing blob is ever read.
# ~3.5 MB instead of the 23 MB of a full depth-1 clone. Usage: bash tools/device/make_gitbundle.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel); tmp=$(mktemp -d)
git clone -q --depth 1 --filter=blob:limit=100k --no-checkout \
  --upload-pack "git -c uploadpack.allowFilter=true upload-pack" "file://$root" "$tmp/s"
git -C "$tmp/s" remote set-url origin file:///nonexistent  # offline there: never fetch
# every blob the filter left out must stay out of the checkout too, or it fetches from nowhere
big=$(git -C "$root" ls-tree -r -l HEAD | awk '$4 > 100000 && $5 !~ /^(reports|docs)\// {print "!/" $5}')
git -C "$tmp/s" sparse-checkout set --no-cone '/*' '!/reports/' '!/docs/' $big
rm -rf "$root/.gitbundle" && mkdir "$root/.gitbundle"
tar czf "$root/.gitbundle/shallow.tgz" -C "$tmp/s" .git
rm -rf "$tmp"
echo ".gitbundle/shallow.tgz: $(du -h "$root/.gitbundle/shallow.tgz" | cut -f1), $(git -C "$root" rev-parse --short HEAD)"
